"""A faster candidate that needs more than the budget with its cache kept is chosen when the
allocator, freeing its cache when the GPU is full, runs it within the budget and frees it in its
first steps only; one that frees it every step is only named (Qwen2.5-0.5B at 16 GiB on an
H200, benchmarks/results/2026-12-03-h200-plans-through-apply: 8 x 1 fully checkpointed ran
under the cap in 150 ms, the plan that fitted running free in 283)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from memfit._gpus import resolve_gpu
from memfit.allocator import AllocatorConfig
from memfit.estimator import least_capacity
from memfit.estimator._estimate import _replay
from memfit.planner import _settle
from memfit.planner._plan_result import Candidate, Evaluated
from memfit.trace import trace_workload
from memfit.workload._step import Workload

torchvision = pytest.importorskip("torchvision")

CONTEXT = 500 << 20  # the memory outside PyTorch's allocator
SLOW = Candidate(16, 2, "bf16-mixed", True, "adamw-fused")
FAST = Candidate(32, 1, "fp32", False, "adamw")


def _batch():
    return torch.randn(1, 3, 224, 224).expand(32, -1, -1, -1), torch.randint(0, 10, (32,))


def _loss(model, b):
    return torch.nn.functional.cross_entropy(model(b[0]), b[1])


WORK = Workload(lambda: torchvision.models.resnet18(num_classes=10), _batch, _loss, steps=4)


@pytest.fixture(scope="module")
def peaks() -> tuple[int, int, int]:
    trace = trace_workload(WORK, resolve_gpu("h100"))
    config = AllocatorConfig()
    allocated, reserved, _ = _replay(trace, config)
    least = least_capacity(trace, config, max(allocated), max(reserved))
    return max(allocated), max(reserved), least


def _evaluated(c: Candidate, allocated: int, reserved: int, seconds: float, usable: int):
    needed = reserved + CONTEXT
    fits = needed <= usable
    return Evaluated(c, allocated, reserved, needed, seconds, 1.0, None, "gpu", fits, ())


def _evaluator(capacity: int, peaks: tuple[int, int, int], *, fitting: bool = True):
    """An evaluator whose usable memory leaves ``capacity`` to PyTorch's allocator once the
    settling margin and the context are taken off; the fast candidate is ResNet-18 as traced."""
    allocated, reserved, _ = peaks
    usable = int((capacity + CONTEXT) / (1 - _settle.SETTLE_MARGIN)) + 1
    seen = {FAST: _evaluated(FAST, allocated, reserved, 0.1, usable)}
    if fitting:
        seen[SLOW] = _evaluated(SLOW, allocated // 2, reserved // 2, 0.3, usable)
    return SimpleNamespace(
        seen=seen, usable=usable, traces=0, gpu=resolve_gpu("h100"), workload=lambda c: WORK
    )


def test_a_faster_step_that_settles_after_freeing_its_cache_is_chosen(peaks) -> None:
    _, reserved, least = peaks
    ev = _evaluator((least + reserved) // 2, peaks)
    assert not ev.seen[FAST].fits
    chosen, note = _settle.settled_choice(ev, ev.seen[SLOW], 0.05)  # type: ignore[arg-type]
    assert chosen is not None and chosen.candidate == FAST and chosen.fits
    assert chosen.runs_in == least + CONTEXT and chosen.cache_frees >= 1
    assert chosen.footprint == chosen.runs_in < chosen.needed
    assert ev.seen[FAST] is chosen and ev.traces == 1
    assert note is not None and note.startswith("the chosen micro-batch 32 x 1, fp32")
    assert "in step 1 and never after" in note and "3.0x as fast" in note


def test_a_step_that_frees_its_cache_every_step_is_named_not_chosen(peaks) -> None:
    least = peaks[2]
    ev = _evaluator(least, peaks)  # it runs, by freeing the cache in each step
    chosen, note = _settle.settled_choice(ev, ev.seen[SLOW], 0.05)  # type: ignore[arg-type]
    assert chosen is None and not ev.seen[FAST].fits
    assert note is not None and "in every step" in note and "3.0x as fast" in note


def test_where_nothing_fits_with_its_cache_kept_a_settling_step_is_the_plan(peaks) -> None:
    _, reserved, least = peaks
    ev = _evaluator((least + reserved) // 2, peaks, fitting=False)
    chosen, note = _settle.settled_choice(ev, None, 0.05)  # type: ignore[arg-type]
    assert chosen is not None and chosen.fits
    assert note is not None and "nothing fits with its cache kept" in note


def test_nothing_is_traced_where_no_candidate_is_faster_or_small_enough(peaks) -> None:
    allocated, reserved, least = peaks
    ev = _evaluator((least + reserved) // 2, peaks)
    assert _settle.settled_choice(ev, ev.seen[FAST], 0.05) == (None, None)  # type: ignore[arg-type]
    small = _evaluator(allocated - CONTEXT, peaks)  # its live tensors alone are over: not tried
    assert _settle.settled_choice(small, small.seen[SLOW], 0.05) == (None, None)  # type: ignore[arg-type]
    assert ev.traces == small.traces == 0
