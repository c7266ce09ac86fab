"""A small hand-built Estimate for the report tests: no tracing, just the dataclasses; and the
snapshots of ``tests/snapshot`` for the snapshot report's rendering."""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# snapshot_data: the real traces and synthetic snapshots the snapshot tests use
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "snapshot"))

from snapshot_data import fragmenting_events, write_snapshot  # noqa: F401 (a fixture)

from memfit._events import Category
from memfit._gpus import GPU, resolve_gpu
from memfit._units import GiB, MiB
from memfit.estimator._result import Estimate, Timeline, WorkloadSummary
from memfit.estimator._versions import Versions

MODULES = [
    ("transformer.h.11.mlp.c_fc", 900 * MiB),
    ("transformer.h.11.attn", 700 * MiB),
    ("transformer.h.10.mlp.c_fc", 650 * MiB),
    ("lm_head", 600 * MiB),
    ("transformer.wte", 400 * MiB),
]


def synthetic_timeline(n: int = 600, steps: int = 1, scale: int = GiB, seed: int = 0) -> Timeline:
    """Forward builds activations, backward frees them while gradients appear, optimizer last.

    ``n`` events per step. Reserved memory is the running maximum of allocated, rounded up to
    20 MiB, like a caching allocator that never releases.
    """
    rng = random.Random(seed)
    weights = 2 * scale
    allocated: list[int] = []
    phases: list[tuple[str, int]] = []
    fwd, bwd = int(n * 0.4), int(n * 0.4)
    opt = n - fwd - bwd
    for step in range(1, steps + 1):
        base = len(allocated)
        state = 4 * scale if step > 1 else 0
        phases.append((f"step{step}.forward", base))
        for i in range(fwd):
            act = int(6 * scale * (i + 1) / fwd)
            allocated.append(weights + state + act + rng.randrange(0, scale // 4))
        phases.append((f"step{step}.backward", base + fwd))
        for i in range(bwd):
            act = int(6 * scale * (1 - (i + 1) / bwd))
            grads = int(2 * scale * (i + 1) / bwd)
            allocated.append(weights + state + act + grads + rng.randrange(0, scale // 3))
        phases.append((f"step{step}.optimizer", base + fwd + bwd))
        for i in range(opt):
            new_state = int(4 * scale * (i + 1) / opt) if step == 1 else 0
            allocated.append(weights + state + new_state + 2 * scale + rng.randrange(0, scale // 8))
    reserved: list[int] = []
    high = 0
    block = 20 * MiB
    for value in allocated:
        high = max(high, -(-value // block) * block)
        reserved.append(high)
    return Timeline(allocated, reserved, phases)


def make_estimate(
    *,
    gpu: GPU | str | None = None,
    model: str = "gpt2",
    modules: list[tuple[str, int]] | None = None,
    notes: list[str] | None = None,
    timeline: Timeline | None = None,
    non_pytorch: int = 520 * MiB,
    peak_op: str = "aten::addmm",
    **workload: Any,
) -> Estimate:
    """An estimate of a GPT-2-like training step with a ~10 GiB peak."""
    timeline = timeline if timeline is not None else synthetic_timeline()
    peak_allocated = max(timeline.allocated) if timeline.allocated else 0
    peak_reserved = max(timeline.reserved) if timeline.reserved else 0
    summary = {
        "model": model,
        "parameters": 124_439_808,
        "batch": "8 x 1024 tokens",
        "mode": "train",
        "precision": "bf16-mixed",
        "optimizer": "AdamW",
        "activation_checkpointing": False,
        "allocator_config": "expandable_segments:True",
        "steps": 1,
    }
    summary.update(workload)
    by_category = {
        Category.ACTIVATION: 5 * GiB + 300 * MiB,
        Category.PARAMETER: 2 * GiB,
        Category.GRADIENT: 1 * GiB + 200 * MiB,
        Category.TEMPORARY: 640 * MiB,
        Category.WORKSPACE: 32 * MiB,
        Category.BUFFER: 0,
    }
    return Estimate(
        workload=WorkloadSummary(**summary),
        peak_allocated=peak_allocated,
        peak_reserved=peak_reserved,
        non_pytorch=non_pytorch,
        by_category=by_category,
        by_module=list(MODULES if modules is None else modules),
        peak_op=peak_op,
        peak_module="transformer.h.11.mlp.c_fc",
        peak_phase="step1.backward",
        timeline=timeline,
        gpu=resolve_gpu(gpu) if isinstance(gpu, str) else gpu,
        notes=list(notes or []),
        versions=Versions(torch="2.14.1+cu130", transformers="5.24.0"),
    )


@pytest.fixture
def estimate_factory() -> Callable[..., Estimate]:
    return make_estimate


@pytest.fixture
def timeline_factory() -> Callable[..., Timeline]:
    return synthetic_timeline
