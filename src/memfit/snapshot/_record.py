"""Record a run of the emulated allocator as a torch memory snapshot (for tests and benchmarks).

:func:`synthetic_snapshot` runs memory events through :class:`~memfit.allocator.CachingAllocator`
and writes down what torch's ``_record_memory_history`` would have: the same entries in the
same order (``segment_*`` entries before the ``alloc`` that caused them, ``free_requested``
then ``free_completed`` for a free), the end-state ``segments``, and ``allocator_settings``.
Stack frames are shared the way torch shares them: one dict per distinct frame, one list per
allocation (reused by its segment entry), one list per free (reused by its two entries).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from memfit._events import MemoryEvent
from memfit.allocator import AllocatorConfig, CachingAllocator, SegmentEvent

__all__ = ["synthetic_snapshot"]

_START_US = 1_796_000_000_000_000


def _settings(config: AllocatorConfig) -> dict[str, Any]:
    return {
        "PYTORCH_CUDA_ALLOC_CONF": config.to_string(),
        "max_split_size": -1 if config.max_split_size is None else config.max_split_size,
        "garbage_collection_threshold": config.garbage_collection_threshold,
        "expandable_segments": config.expandable_segments,
        "roundup_power2_divisions": {
            str(1 << i): d for i, d in enumerate(config.roundup_power2_divisions)
        },
    }


def _entry(
    action: str, addr: int, size: int, stream: int, time: int, frames: Any
) -> dict[str, Any]:
    entry = {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": time}
    if frames is not None:
        entry["frames"] = frames
    return entry


def synthetic_snapshot(
    events: Iterable[MemoryEvent],
    config: AllocatorConfig | str | None = None,
    *,
    stacks: Sequence[list[dict[str, Any]]] | None = None,
    free_frames: bool = False,
    max_entries: int | None = None,
    device_total: int | None = None,
) -> dict[str, Any]:
    """A ``torch.cuda.memory._snapshot()``-shaped dict for ``events`` run under ``config``.

    ``stacks[event.info]`` is the stack (frame dicts, innermost first) of an allocation; with
    ``free_frames`` each free records a copy of its allocation's stack too (as with
    ``context='all'``). ``max_entries`` keeps only the last entries, like torch's ring buffer.
    Blocks are named by their ``block`` id; the trace shows their emulated addresses.
    """
    alloc = CachingAllocator(config, device_total=device_total)
    cfg = alloc.config
    trace: list[dict[str, Any]] = []
    address: dict[int, tuple[int, int, int, Any]] = {}  # block -> (addr, size, stream, frames)
    seen = 0
    time = _START_US
    for event in events:
        time += 3
        if event.kind == "alloc":
            addr = alloc.malloc(event.block, event.size, event.stream)
            frames = None
            if stacks is not None and event.info is not None:
                frames = list(stacks[event.info])
            new: list[SegmentEvent] = []
            if alloc.num_device_alloc + alloc.num_device_free != seen:
                all_events = alloc.segment_events
                count = alloc.num_device_alloc + alloc.num_device_free - seen
                new = all_events[len(all_events) - count :]
                seen += count
            for seg in new:
                trace.append(_entry(seg.action, seg.address, seg.size, seg.stream, time, frames))
            trace.append(_entry("alloc", addr, event.size, event.stream, time, frames))
            address[event.block] = (addr, event.size, event.stream, frames)
        else:
            addr, size, stream, frames = address.pop(event.block)
            alloc.free(event.block)
            shared = list(frames) if free_frames and frames is not None else frames
            trace.append(_entry("free_requested", addr, size, stream, time, shared))
            trace.append(_entry("free_completed", addr, size, stream, time + 1, shared))
    if max_entries is not None:
        trace = trace[len(trace) - max_entries :] if len(trace) > max_entries else trace
    state = {True: "active_allocated", False: "inactive"}
    segments = [
        {
            "device": 0,
            "address": s.address,
            "total_size": s.total_size,
            "allocated_size": s.allocated_size,
            "requested_size": s.requested_size,
            "stream": s.stream,
            "segment_type": s.pool,
            "is_expandable": s.is_expandable,
            "frames": [],
            "blocks": [
                {
                    "address": b.address,
                    "size": b.size,
                    "requested_size": b.requested_size,
                    "state": state[b.allocated],
                }
                for b in s.blocks
            ],
        }
        for s in alloc.segments()
    ]
    return {
        "segments": segments,
        "device_traces": [trace],
        "allocator_settings": _settings(cfg),
        "external_annotations": [],
    }
