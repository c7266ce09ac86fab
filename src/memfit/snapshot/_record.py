"""Record a run of the emulated allocator as a torch memory snapshot (for tests and benchmarks).

:func:`synthetic_snapshot` replays memory events (:class:`~memfit.allocator.AllocatorReplay`)
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
from memfit.allocator import AllocatorConfig, AllocatorReplay, ReplayOps

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
    events = list(events)
    replay = AllocatorReplay(config, device_total=device_total)
    trace: list[dict[str, Any]] = []
    address: dict[int, tuple[int, int, int, Any]] = {}  # block -> (addr, size, stream, frames)
    segment_events = replay.segment_events
    seen = 0

    def write(index: int) -> None:  # the entries of event ``index``, just replayed
        nonlocal seen
        event = events[index]
        time = _START_US + 3 * (index + 1)
        if event.kind == "alloc":
            addr = replay.address_of(event.block)
            frames = None
            if stacks is not None and event.info is not None:
                frames = list(stacks[event.info])
            for seg in segment_events[seen:]:  # the segments it caused come first
                trace.append(_entry(seg.action, seg.address, seg.size, seg.stream, time, frames))
            seen = len(segment_events)
            trace.append(_entry("alloc", addr, event.size, event.stream, time, frames))
            address[event.block] = (addr, event.size, event.stream, frames)
        else:
            addr, size, stream, frames = address.pop(event.block)
            shared = list(frames) if free_frames and frames is not None else frames
            trace.append(_entry("free_requested", addr, size, stream, time, shared))
            trace.append(_entry("free_completed", addr, size, stream, time + 1, shared))

    replay.run(ReplayOps.from_events(events), hook=write)
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
        for s in replay.segments()
    ]
    return {
        "segments": segments,
        "device_traces": [trace],
        "allocator_settings": _settings(replay.config),
        "external_annotations": [],
    }
