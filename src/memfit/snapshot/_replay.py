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
from contextlib import suppress
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from memfit._errors import InvalidInputError
from memfit.allocator import (
    ALLOC,
    EMPTY_CACHE,
    FREE,
    SETUP,
    AddressSpace,
    AllocatorConfig,
    AllocatorReplay,
    Recording,
    ReplayOps,
    SegmentEvent,
    SegmentInfo,
)
from memfit.snapshot._timeline import TraceTimeline

__all__ = ["ReplayRun", "build_ops", "replay_peaks", "run_replay", "run_result", "start_replay"]


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


def build_ops(timeline: TraceTimeline) -> ReplayOps:
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
    kind[:p] = SETUP
    block[:p] = [b.address for b in setup]
    size[:p] = [b.size for b in setup]
    stream[:p] = [b.stream for b in setup]
    events = np.arange(n, dtype=np.int64)
    event_at = p + events + np.searchsorted(empties, events, side="right")
    empty_at = p + empties + np.arange(len(empties), dtype=np.int64)
    kind[event_at] = np.where(timeline.is_alloc, ALLOC, FREE)
    block[event_at] = timeline.addr
    size[event_at] = timeline.size
    stream[event_at] = timeline.stream
    kind[empty_at] = EMPTY_CACHE
    return ReplayOps(
        kind=array("q", kind.tobytes()),
        block=array("q", block.tobytes()),
        size=array("q", size.tobytes()),
        stream=array("q", stream.tobytes()),
    )


def start_replay(
    run: ReplayRun,
    config: AllocatorConfig,
    capacity: int | None,
    device_total: int | None,
    address_space: AddressSpace | None = None,
) -> AllocatorReplay | None:
    """A replay under ``config``; None (and ``run.error`` says why) if the settings cannot be
    emulated."""
    try:
        return AllocatorReplay(
            config, capacity, device_total=device_total, address_space=address_space
        )
    except InvalidInputError as exc:
        run.error = str(exc)
        return None


def run_result(run: ReplayRun, replay: AllocatorReplay) -> ReplayRun:
    """``run`` with the peaks of ``replay`` and where it stopped, if it did."""
    run.peak_allocated = replay.peak_allocated
    run.peak_reserved = replay.peak_reserved
    if replay.oom is not None:
        run.oom_event, run.oom_message = replay.oom.index, replay.oom.message
    run.error = replay.error
    return run


def run_replay(
    ops: ReplayOps,
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
    replay = start_replay(run, config, capacity, device_total, address_space)
    if replay is None:
        return run
    allocated: array[int] = array("q")
    every = max(ops.num_events // samples, 1) if samples else 0
    record = Recording(allocated, capture_event=capture_event, sample_every=every)
    with suppress(InvalidInputError):  # kept in replay.error
        replay.run(ops, record=record)
    run.allocated = np.frombuffer(allocated, dtype=np.int64)
    run.segment_events = replay.segment_events
    run.captured, run.samples = record.captured, record.samples
    return run_result(run, replay)


def replay_peaks(
    ops: ReplayOps, config: AllocatorConfig, capacity: int | None, device_total: int | None
) -> ReplayRun:
    """Replay ``ops`` and keep only the peaks (and where an allocation did not fit): fast."""
    run = ReplayRun()
    replay = start_replay(run, config, capacity, device_total)
    if replay is None:
        return run
    with suppress(InvalidInputError):  # kept in replay.error
        replay.run(ops)
    return run_result(run, replay)
