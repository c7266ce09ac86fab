"""The two sides of ``op_sweep.py``: one case's allocation events as memfit traces them (on
meta tensors, any machine) and as the GPU's caching allocator makes them.

Events are ``[kind, key, size]`` lists (``key``: the block, or the GPU address): ``a`` an
allocation of ``size`` requested bytes, ``f`` its free (the GPU's ``free_requested``), ``c``
the GPU's ``free_completed``, ``s``/``S`` a segment reserved/released. A traced allocation
carries its op and category as a fourth item.

Both sides run the call once before the recorded one on the GPU (kernels loaded, the cuBLAS
and cuDNN handles' workspaces made, the cache then emptied): what a library allocates at its
first launch in a process is not the op's. The trace, a fresh one per case, allocates those
workspaces where the first launch would; they are kept out of its events and listed as
``persistent``.
"""

from __future__ import annotations

from typing import Any

import torch
from op_sweep_cases import moved, run_call

_GPU_KINDS = {
    "alloc": "a",
    "free_requested": "f",
    "free_completed": "c",
    "segment_alloc": "s",
    "segment_free": "S",
}


def trace_case(
    op: Any, sample: Any, direction: str, on_cpu: list[bool] | None = None, gpu_name: str = "h100"
) -> dict[str, Any]:
    """memfit's events for the call on ``sample`` (CPU tensors), with the emulator's peaks."""
    from memfit._events import Category
    from memfit._gpus import resolve_gpu
    from memfit.allocator import AllocatorReplay, ReplayOps
    from memfit.trace._tracer import _Session

    session = _Session(resolve_gpu(gpu_name))
    rec = session.recorder

    def to_meta(t: torch.Tensor) -> torch.Tensor:
        meta = torch.empty_like(t, device="meta")  # the layout t.to("cuda") gives
        if t.numel() <= (1 << 20):
            session.shadows.set(meta, t)  # values for data-dependent ops (nonzero, item)
        return meta

    inputs: list[torch.Tensor] = []

    def to_meta_input(t: torch.Tensor) -> torch.Tensor:
        meta_t = to_meta(t)
        inputs.append(meta_t)
        return meta_t

    meta = moved(sample, to_meta_input, on_cpu)

    def backward() -> None:
        rec.phase = "step.backward"

    with session.active():
        rec.phase = "step.forward"
        for t in inputs:  # the GPU made them before recording: a view of one is no allocation
            rec.track(t, Category.INPUT, "input")
        start = len(rec.events)
        run_call(op, meta, direction, backward)
        raw = rec.events[start:]
    before = {e.block for e in rec.events[:start] if e.kind == "alloc"}  # the inputs
    kept = [e for e in raw if e.block not in rec.persistent and e.block not in before]
    events: list[list[Any]] = []
    for e in kept:
        if e.kind == "alloc":
            info = rec.infos[e.info] if e.info is not None else None
            label = f"{info.op}:{info.category.value}" if info is not None else ""
            events.append(["a", e.block, e.size, label])
        else:
            events.append(["f", e.block, e.size])
    replay = AllocatorReplay("")
    replay.run(ReplayOps.from_events(kept))
    persistent = [e.size for e in raw if e.kind == "alloc" and e.block in rec.persistent]
    return {
        "events": events,
        "persistent": persistent,
        "peak_allocated": replay.peak_allocated,
        "peak_reserved": replay.peak_reserved,
        "notes": list(rec.notes),
    }


class GpuRecorder:
    """The caching allocator's own trace (``_record_memory_history``) around a call."""

    device = "cuda"

    def __init__(self, max_entries: int = 200_000) -> None:
        self.max_entries = max_entries
        self._base = (0, 0)

    def sync(self) -> None:
        torch.cuda.synchronize()

    def start(self) -> None:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        self._base = (torch.cuda.memory_allocated(), torch.cuda.memory_reserved())
        torch.cuda.memory._record_memory_history(
            "all",
            context=None,
            stacks="python",
            max_entries=self.max_entries,
            clear_history=True,  # the warm-up's and earlier cases' events are not this call's
        )

    def stop(self) -> dict[str, Any]:
        torch.cuda.synchronize()
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        events = [
            [_GPU_KINDS[e["action"]], int(e["addr"]), int(e["size"])]
            for trace in snap["device_traces"]
            for e in trace
            if e["action"] in _GPU_KINDS
        ]
        return {
            "events": events,
            "peak_allocated": torch.cuda.max_memory_allocated() - self._base[0],
            "peak_reserved": torch.cuda.max_memory_reserved() - self._base[1],
            "truncated": len(events) >= self.max_entries,
        }


class DryRecorder:
    """No GPU: the call runs on the CPU, nothing is recorded (tests the measure loop)."""

    device = "cpu"

    def sync(self) -> None:
        pass

    def start(self) -> None:
        pass

    def stop(self) -> dict[str, Any]:
        return {"events": [], "peak_allocated": 0, "peak_reserved": 0, "truncated": False}


def measure_case(
    op: Any, sample: Any, direction: str, on_cpu: list[bool], recorder: Any
) -> dict[str, Any]:
    """The allocator's events for the call on ``sample`` moved to ``recorder.device``: a
    warm-up call, then the recorded one (inputs made before recording starts)."""
    on_device = moved(sample, lambda t: t.to(recorder.device), on_cpu)
    run_call(op, on_device, direction)
    recorder.sync()
    recorder.start()
    try:
        run_call(op, on_device, direction)
    finally:
        result = recorder.stop()
    return result


def gpu_meta(dry: bool) -> dict[str, Any]:
    """The machine and versions a measurement ran with."""
    meta: dict[str, Any] = {"torch": torch.__version__, "dry_run": dry}
    if not dry:
        meta["gpu"] = torch.cuda.get_device_name()
        meta["cuda"] = torch.version.cuda
        meta["cudnn"] = torch.backends.cudnn.version()
        meta["capability"] = list(torch.cuda.get_device_capability())
    return meta
