"""Replay a recorded trace through the emulated caching allocator.

The operations are the trace's allocations and frees, in order, plus one ``empty_cache`` where
the trace shows a run of ``segment_free``/``segment_unmap`` entries (``torch.cuda.empty_cache``,
or the free-and-retry path before a new ``cudaMalloc``, which frees the same segments with the
default settings). A trace that does not start empty first allocates the blocks alive at its
start. With the recorded settings and the recorded segment addresses
(:class:`~memfit.allocator.ScriptedAddressSpace`) the emulator reproduces every segment event
of the 31 traces recorded on an H200 exactly.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from memfit._errors import InvalidInputError
from memfit.allocator import (
    AddressSpace,
    AllocatorConfig,
    AllocatorOOM,
    CachingAllocator,
    SegmentEvent,
    SegmentInfo,
)
from memfit.snapshot._timeline import TraceTimeline

__all__ = ["Ops", "ReplayRun", "build_ops", "replay_peaks", "run_replay"]

_ALLOC, _FREE, _EMPTY, _SETUP = 0, 1, 2, 3


@dataclass(frozen=True)
class Ops:
    """The operations to replay, as parallel arrays (iterated as Python ints)."""

    kind: array[int]
    block: array[int]
    size: array[int]
    stream: array[int]
    num_events: int
    num_empty_cache: int


@dataclass
class ReplayRun:
    """What the emulator did over one replay.

    ``allocated`` has the allocated bytes after each trace event (reserved bytes are the
    trace's own, exact). Peaks are torch's peak statistics.
    """

    peak_allocated: int = 0
    peak_reserved: int = 0
    allocated: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    segment_events: list[SegmentEvent] = field(default_factory=list)
    captured: list[SegmentInfo] = field(default_factory=list)  # at ``capture_event``
    samples: list[tuple[int, int]] = field(default_factory=list)  # (event, largest free block)
    oom_event: int | None = None  # the event whose allocation did not fit
    oom_message: str | None = None
    error: str | None = None  # the trace could not be replayed at all


def build_ops(timeline: TraceTimeline) -> Ops:
    """The replay operations for a trace (see the module docstring)."""
    n = timeline.num_events
    setup = timeline.initial_blocks
    empties = timeline.empty_cache_before
    total = len(setup) + n + len(empties)
    kind = np.empty(total, dtype=np.int64)
    block = np.zeros(total, dtype=np.int64)
    size = np.zeros(total, dtype=np.int64)
    stream = np.zeros(total, dtype=np.int64)
    p = len(setup)
    kind[:p] = _SETUP
    block[:p] = [b.address for b in setup]
    size[:p] = [b.size for b in setup]
    stream[:p] = [b.stream for b in setup]
    events = np.arange(n, dtype=np.int64)
    event_at = p + events + np.searchsorted(empties, events, side="right")
    empty_at = p + empties + np.arange(len(empties), dtype=np.int64)
    kind[event_at] = np.where(timeline.is_alloc, _ALLOC, _FREE)
    block[event_at] = timeline.addr
    size[event_at] = timeline.size
    stream[event_at] = timeline.stream
    kind[empty_at] = _EMPTY
    return Ops(
        kind=array("q", kind.tobytes()),
        block=array("q", block.tobytes()),
        size=array("q", size.tobytes()),
        stream=array("q", stream.tobytes()),
        num_events=n,
        num_empty_cache=len(empties),
    )


def _allocator(
    run: ReplayRun,
    config: AllocatorConfig,
    capacity: int | None,
    device_total: int | None,
    address_space: AddressSpace | None,
) -> CachingAllocator | None:
    try:
        return CachingAllocator(
            config, capacity, device_total=device_total, address_space=address_space
        )
    except InvalidInputError as exc:
        run.error = str(exc)
        return None


def run_replay(
    ops: Ops,
    config: AllocatorConfig,
    *,
    capacity: int | None = None,
    device_total: int | None = None,
    address_space: AddressSpace | None = None,
    capture_event: int | None = None,
    samples: int = 0,
) -> ReplayRun:
    """Replay ``ops`` under ``config``, recording allocated memory after every event.

    Stops at the first allocation that does not fit. ``capture_event``: keep the segments
    after that event. ``samples``: record the largest free block at about that many evenly
    spaced events (and at ``capture_event``).
    """
    run = ReplayRun()
    a = _allocator(run, config, capacity, device_total, address_space)
    if a is None:
        return run
    allocated: array[int] = array("q")
    every = max(ops.num_events // samples, 1) if samples else 0
    capture = -1 if capture_event is None else capture_event
    event = -1
    malloc, free, empty = a.malloc, a.free, a.empty_cache
    keep = allocated.append
    try:
        for kind, block, size, stream in zip(
            ops.kind, ops.block, ops.size, ops.stream, strict=True
        ):
            if kind == _ALLOC:
                event += 1
                malloc(block, size, stream)
            elif kind == _FREE:
                event += 1
                free(block)
            elif kind == _EMPTY:
                empty()
                continue
            else:
                malloc(block, size, stream)
                continue
            keep(a.allocated)
            if event == capture:
                run.captured = a.segments()
            if every and (event % every == 0 or event == capture):
                run.samples.append((event, a.largest_free_block()))
    except AllocatorOOM as exc:
        run.oom_event = max(event, 0)
        run.oom_message = str(exc)
    except InvalidInputError as exc:
        run.error = str(exc)
    run.allocated = np.frombuffer(allocated, dtype=np.int64)
    run.peak_allocated = a.peak_allocated
    run.peak_reserved = a.peak_reserved
    run.segment_events = a.segment_events
    return run


def replay_peaks(
    ops: Ops, config: AllocatorConfig, capacity: int | None, device_total: int | None
) -> ReplayRun:
    """Replay ``ops`` and keep only the peaks (and where an allocation did not fit): fast."""
    run = ReplayRun()
    a = _allocator(run, config, capacity, device_total, None)
    if a is None:
        return run
    malloc, free, empty = a.malloc, a.free, a.empty_cache
    events = 0  # allocations and frees of the trace done (not the setup ones)
    try:
        for kind, block, size, stream in zip(
            ops.kind, ops.block, ops.size, ops.stream, strict=True
        ):
            if kind == _FREE:
                free(block)
            elif kind == _ALLOC:
                malloc(block, size, stream)
            elif kind == _EMPTY:
                empty()
                continue
            else:
                malloc(block, size, stream)
                continue
            events += 1
    except AllocatorOOM as exc:
        run.oom_event = events
        run.oom_message = str(exc)
    except InvalidInputError as exc:
        run.error = str(exc)
    run.peak_allocated = a.peak_allocated
    run.peak_reserved = a.peak_reserved
    return run
