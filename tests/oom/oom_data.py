"""Test data for the OOM report: a fake probe, synthetic snapshots and facts files."""

from __future__ import annotations

import copy
import json
import random
from functools import partial
from pathlib import Path
from typing import Any

import memfit.oom
from memfit._events import MemoryEvent
from memfit.report import oom_markdown
from memfit.snapshot._record import synthetic_snapshot

# memfit.oom's report writers with memfit.report's Markdown, as memfit.oom_report and
# memfit run wire them (oom renders nothing itself)
write_report = partial(memfit.oom.write_report, render=oom_markdown)
finalize_reports = partial(memfit.oom.finalize_reports, render=oom_markdown)
run_with_report = partial(memfit.oom.run_with_report, render=oom_markdown)

MiB = 1 << 20
GiB = 1 << 30
TRACES = (
    Path(__file__).resolve().parents[2]
    / "benchmarks"
    / "results"
    / "2026-11-30-h200-estimate-accuracy"
    / "traces"
)

FRAMES = [
    {"filename": "/x/site-packages/torch/nn/functional.py", "line": 10, "name": "linear"},
    {"filename": "/home/u/model.py", "line": 42, "name": "forward"},
    {"filename": "/x/site-packages/torch/nn/modules/module.py", "line": 1, "name": "_call_impl"},
    {"filename": "/home/u/train.py", "line": 7, "name": "main"},
]


def fragmenting_events(n: int = 600, seed: int = 1) -> list[MemoryEvent]:
    """Allocations of changing sizes freed in random order: holes in the segments."""
    rng = random.Random(seed)
    events: list[MemoryEvent] = []
    live: list[int] = []
    for block in range(n):
        if live and (rng.random() < 0.45 or len(live) > 40):
            events.append(MemoryEvent("free", live.pop(rng.randrange(len(live))), 0))
        else:
            size = rng.choice([rng.randint(1, MiB), rng.randint(11 * MiB, 300 * MiB)])
            events.append(MemoryEvent("alloc", block, size, 0, 0))
            live.append(block)
    return events


def oom_snapshot(failed: int = 512 * MiB, device_free: int = 100 * MiB) -> dict[str, Any]:
    """A snapshot shaped like torch's at an OOM: a trace ending in an ``oom`` entry, which
    (as torch writes it) has ``device_free`` and no ``addr``."""
    data = synthetic_snapshot(fragmenting_events(), stacks=[FRAMES])
    trace = data["device_traces"][0]
    trace.append(
        {
            "action": "oom",
            "device_free": device_free,
            "size": failed,
            "stream": 0,
            "time_us": trace[-1]["time_us"] + 5,
            "frames": FRAMES,
        }
    )
    return data


class FakeProbe:
    """Stands in for torch and NVML in the observer."""

    def __init__(self, snapshot: dict[str, Any] | None = None, **stats: int) -> None:
        self._snapshot = snapshot if snapshot is not None else oom_snapshot()
        self.stats = {
            "allocated_bytes.all.current": 60 * GiB,
            "reserved_bytes.all.current": 70 * GiB,
            "active_bytes.all.current": 60 * GiB,
            "inactive_split_bytes.all.current": 9 * GiB,
            "segment.all.current": 40,
            "num_ooms": 1,
            **stats,
        }
        self.snapshots = 0

    def memory_stats(self, device: int) -> dict[str, Any]:
        return dict(self.stats)

    def snapshot(self) -> dict[str, Any]:
        self.snapshots += 1
        return copy.deepcopy(self._snapshot)

    def device(self, device: int) -> dict[str, Any]:
        return {"index": device, "name": "NVIDIA H200", "total": 80 * GiB, "uuid": None}

    def nvml_process_memory(self, device: dict[str, Any]) -> tuple[int | None, str | None]:
        return 71 * GiB, None


class BrokenProbe(FakeProbe):
    """Every read fails, as when the CUDA context is unusable."""

    def memory_stats(self, device: int) -> dict[str, Any]:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    def snapshot(self) -> dict[str, Any]:
        raise RuntimeError("snapshot failed")

    def device(self, device: int) -> dict[str, Any]:
        raise RuntimeError("no device")


def facts(
    *,
    alloc: int = 2 * GiB,
    available: int = 1 * GiB,
    allocated: int = 60 * GiB,
    reserved: int = 62 * GiB,
    phase: str = "forward",
    grad_enabled: bool | None = True,
    autocast: bool | None = False,
    model: dict[str, Any] | None = None,
    snapshot: str | None = None,
    expandable: bool = False,
) -> dict[str, Any]:
    """A facts file's content, as the observer writes it."""
    return {
        "schema": "memfit.oom/1",
        "status": "pending",
        "time": "2026-11-30T12:00:00+00:00",
        "pid": 4242,
        "argv": ["train.py", "--batch-size", "64"],
        "host": "node1",
        "torch": "2.11.0+cu130",
        "alloc_conf": "expandable_segments:True" if expandable else None,
        "device": {"index": 0, "name": "NVIDIA H200", "total": 80 * GiB},
        "failure": {
            "alloc_size": alloc,
            "block_size": alloc,
            "limit": 80 * GiB,
            "fraction_limited": False,
            "device_free": available,
            "available": available,
            "shortfall": max(alloc - available, 0),
            "thread": "MainThread",
            "in_main_thread": True,
            "phase": phase,
            "stack": [{"filename": "/home/u/train.py", "line": 7, "name": "main"}],
            "main_stack": None,
            "recorded_frames": None,
            "grad_enabled": grad_enabled,
            "autocast": autocast,
        },
        "memory": {
            "allocated": allocated,
            "reserved": reserved,
            "largest_free_block": 20 * MiB,
            "segments": 12,
            "nvml_process": reserved + 600 * MiB,
            "nvml_note": None,
        },
        "model": model,
        "history": {"entries": 1000, "recorded": snapshot is not None},
        "allocator_settings": None,
        "files": {"json": "oom-x.json", **({"snapshot": snapshot} if snapshot else {})},
        "errors": [],
    }


def model(
    params: int = 4 * GiB, grads: int = 4 * GiB, state: int = 8 * GiB, **kw: Any
) -> dict[str, Any]:
    return {
        "name": "GPT2LMHeadModel",
        "parameters": params // 4,
        "parameter_bytes": params,
        "gradient_bytes": grads,
        "optimizer_state_bytes": state,
        "dtypes": {"float32": params},
        "optimizer": "AdamW",
        "optimizer_foreach": None,
        "optimizer_fused": None,
        "checkpointing": False,
        "huggingface": True,
        **kw,
    }


def write_facts(directory: Path, data: dict[str, Any], stem: str = "oom-x") -> Path:
    path = directory / f"{stem}.json"
    data = dict(data, files=dict(data["files"], json=path.name))
    path.write_text(json.dumps(data))
    return path
