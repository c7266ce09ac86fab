"""Replay a trace of allocations and frees through the emulated allocator: :func:`replay`.

Turns the memory events of a predicted (or recorded) step into what torch would report after
each event: allocated and reserved bytes, their peaks and when they happen, every segment
event, and the first OOM if the trace does not fit. Built for long traces: a million events
take a few seconds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from memfit._errors import InvalidInputError
from memfit._events import MemoryEvent
from memfit.allocator._address import AddressSpace
from memfit.allocator._blocks import Block
from memfit.allocator._caching import as_config
from memfit.allocator._config import AllocatorConfig
from memfit.allocator._errors import AllocatorOOM
from memfit.allocator._snapshot import SegmentEvent, SegmentInfo, take_snapshot
from memfit.allocator._state import AllocatorState

__all__ = ["OOMInfo", "ReplayResult", "replay"]


@dataclass(frozen=True)
class OOMInfo:
    """The request that did not fit, and the allocator's state when it failed."""

    index: int  # event index of the failed allocation
    block: int
    size: int  # bytes requested
    alloc_size: int  # the segment the allocator tried to get
    allocated: int
    reserved: int
    capacity: int | None
    message: str


@dataclass(frozen=True)
class ReplayResult:
    """What the allocator reported along a trace.

    ``allocated[i]`` / ``reserved[i]`` are the bytes after event ``i``. The peaks are torch's
    peak stats, which can exceed every per-event value of ``reserved`` when memory was mapped
    and released inside one event (the OOM retry path). ``peak_index`` / ``peak_reserved_index``
    are the first events at which each peak was reached (-1 for an empty trace). If an
    allocation failed, ``oom`` says which; the arrays stop before it.
    """

    peak_allocated: int
    peak_reserved: int
    peak_index: int
    peak_reserved_index: int
    allocated: npt.NDArray[np.int64]
    reserved: npt.NDArray[np.int64]
    segment_events: list[SegmentEvent]
    segments: list[SegmentInfo]  # the state after the last replayed event
    oom: OOMInfo | None

    @property
    def num_events(self) -> int:
        """Events replayed without failing."""
        return len(self.allocated)


def _check_event(event: MemoryEvent, index: int) -> None:
    if event.kind == "alloc":
        if isinstance(event.size, bool) or not isinstance(event.size, int) or event.size < 0:
            raise InvalidInputError(f"event {index}: size {event.size!r} is not a byte count.")
        if isinstance(event.stream, bool) or not isinstance(event.stream, int) or event.stream < 0:
            raise InvalidInputError(f"event {index}: stream {event.stream!r} is not >= 0.")
    elif event.kind != "free":
        raise InvalidInputError(f"event {index}: kind {event.kind!r} is not 'alloc' or 'free'.")


def replay(
    events: Iterable[MemoryEvent],
    config: AllocatorConfig | str | None = None,
    capacity: int | None = None,
    *,
    device_total: int | None = None,
    address_space: AddressSpace | None = None,
) -> ReplayResult:
    """Run ``events`` through a fresh emulated allocator and report what it did.

    Stops at the first allocation that does not fit in ``capacity`` (after torch's
    free-and-retry path) and reports it in ``oom`` instead of raising. Malformed traces (a free
    of a block that is not live, an alloc of a live one) raise ``InvalidInputError``.
    """
    st = AllocatorState(as_config(config), capacity, device_total, address_space)
    live: dict[int, Block | None] = {}
    timeline = _Timeline()
    _run(st, live, events, timeline)
    return ReplayResult(
        peak_allocated=st.peak_allocated,
        peak_reserved=st.peak_reserved,
        peak_index=timeline.peak_index,
        peak_reserved_index=timeline.peak_reserved_index,
        allocated=np.array(timeline.allocated, dtype=np.int64),
        reserved=np.array(timeline.reserved, dtype=np.int64),
        segment_events=st.events,
        segments=_final_segments(st, live),
        oom=timeline.oom,
    )


@dataclass
class _Timeline:
    """What :func:`_run` records along the trace."""

    allocated: list[int] = field(default_factory=list)
    reserved: list[int] = field(default_factory=list)
    peak_index: int = -1
    peak_reserved_index: int = -1
    oom: OOMInfo | None = None


def _run(
    st: AllocatorState,
    live: dict[int, Block | None],
    events: Iterable[MemoryEvent],
    timeline: _Timeline,
) -> None:
    """The replay loop, kept flat: it runs once per event."""
    allocated, reserved = timeline.allocated, timeline.reserved
    peak_a = peak_r = 0
    malloc, free = st.malloc, st.free
    for index, event in enumerate(events):
        st.op = index
        if event.kind == "alloc":
            size, stream = event.size, event.stream
            if type(size) is not int or size <= 0 or type(stream) is not int or stream < 0:
                _reject(event, index, live)  # raises unless a zero-byte allocation
                live[event.block] = None  # no memory, as in torch
            elif event.block in live:
                _reject(event, index, live)
            else:
                try:
                    live[event.block] = malloc(size, stream)
                except AllocatorOOM as err:
                    timeline.oom = _oom_info(index, event, err)
                    return
        elif event.kind == "free" and event.block in live:
            block = live.pop(event.block)
            if block is not None:
                free(block)
        else:
            _reject(event, index, live)
        allocated.append(st.allocated)
        reserved.append(st.reserved)
        if st.peak_allocated != peak_a:
            peak_a, timeline.peak_index = st.peak_allocated, index
        if st.peak_reserved != peak_r:
            peak_r, timeline.peak_reserved_index = st.peak_reserved, index


def _oom_info(index: int, event: MemoryEvent, err: AllocatorOOM) -> OOMInfo:
    return OOMInfo(
        index=index,
        block=event.block,
        size=event.size,
        alloc_size=err.alloc_size,
        allocated=err.allocated,
        reserved=err.reserved,
        capacity=err.capacity,
        message=str(err),
    )


def _reject(event: MemoryEvent, index: int, live: dict[int, Block | None]) -> None:
    """Raise for a malformed event; return for a valid zero-byte allocation."""
    _check_event(event, index)
    if event.kind == "free":
        raise InvalidInputError(
            f"event {index} frees block {event.block}, which is not allocated at that point."
        )
    if event.block in live:
        raise InvalidInputError(
            f"event {index} allocates block {event.block}, which is already allocated."
        )


def _final_segments(st: AllocatorState, live: dict[int, Block | None]) -> list[SegmentInfo]:
    blocks = [b for pool in (st.small, st.large) for b in pool.free.values()]
    blocks.extend(b for b in live.values() if b is not None)
    return take_snapshot(blocks)
