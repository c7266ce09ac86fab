"""What the trace itself says, computed with arrays: pairs, live bytes, reserved bytes, peaks.

The events are the trace's ``alloc`` and ``free_completed`` entries, in order. Each free is
paired with the allocation at the same address before it. A free with no allocation before it
means the block was allocated before the trace begins: the ring buffer of
``_record_memory_history(max_entries=...)`` wrapped, or recording started late. Blocks alive
at the start and never freed are known only from the end state (``segments``). Both are
counted in the memory at the start, so the timeline is right even for a wrapped trace.

``requested`` is the bytes callers asked for in the live allocations (the sizes the trace
records, as in torch's memory_viz); ``reserved`` is what the segment entries add up to
(``segment_alloc``/``segment_map`` minus ``segment_free``/``segment_unmap``), exactly torch's
``memory_reserved()``. After event ``i`` both include every entry up to and including it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from memfit._errors import InvalidInputError
from memfit.allocator import SegmentInfo
from memfit.snapshot._collect import (
    ALLOC,
    FREE,
    OOM,
    SEGMENT_ALLOC,
    SEGMENT_FREE,
    SEGMENT_MAP,
    SEGMENT_UNMAP,
    CollectedTrace,
)
from memfit.snapshot._snapshot import Snapshot

__all__ = ["InitialBlock", "OOMEntry", "TraceTimeline", "trace_timeline"]

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class InitialBlock:
    """A block allocated before the trace begins (known from a free, or the end state)."""

    address: int
    size: int  # requested bytes
    stream: int
    freed_at: int | None  # event index of its free, None if alive at the end


@dataclass(frozen=True, slots=True)
class OOMEntry:
    """An ``oom`` entry: an allocation failed even after freeing cached memory."""

    event: int  # the next event after it (or the number of events)
    position: int  # entry index in the trace
    size: int  # bytes requested
    device_free: int  # bytes free on the device, as cudaMemGetInfo said
    time_us: int


@dataclass(frozen=True)
class TraceTimeline:
    """Per event: what happened and the memory after it. ``E`` events in all."""

    entry: I64  # index of the event in the collected arrays
    is_alloc: npt.NDArray[np.bool_]
    addr: I64
    size: I64  # requested bytes (a free carries its allocation's size)
    stream: I64
    partner: I64  # alloc: event index of its free (-1 if never); free: its alloc (-1 if before)
    requested: I64  # live requested bytes after each event
    reserved: I64  # reserved bytes after each event
    initial_requested: int
    initial_reserved: int
    initial_blocks: tuple[InitialBlock, ...]
    peak_requested: int
    peak_requested_event: int
    peak_reserved: int
    peak_reserved_event: int
    empty_cache_before: I64  # event indices before which a run of segment frees happened
    ooms: tuple[OOMEntry, ...]
    notes: tuple[str, ...]

    @property
    def num_events(self) -> int:
        return len(self.entry)

    @property
    def complete(self) -> bool:
        """Whether the trace starts from an empty allocator (nothing allocated or reserved)."""
        return not self.initial_blocks and self.initial_reserved == 0

    def live_at(self, event: int) -> npt.NDArray[np.int64]:
        """Event indices of the allocations alive after ``event`` (allocated in the trace)."""
        index = np.arange(self.num_events, dtype=np.int64)
        alive = self.is_alloc & (index <= event) & ((self.partner < 0) | (self.partner > event))
        return np.flatnonzero(alive)

    def initial_live_at(self, event: int) -> list[InitialBlock]:
        """Blocks from before the trace still alive after ``event``."""
        return [b for b in self.initial_blocks if b.freed_at is None or b.freed_at > event]


def _pairs(addr: I64, is_alloc: npt.NDArray[np.bool_], position: I64, path: str) -> I64:
    """Pair each free with the allocation at its address before it; -1 where there is none."""
    n = len(addr)
    partner = np.full(n, -1, dtype=np.int64)
    if n < 2:
        return partner
    order = np.lexsort((np.arange(n), addr))
    sorted_addr, sorted_alloc = addr[order], is_alloc[order]
    same = sorted_addr[1:] == sorted_addr[:-1]
    repeated = same & (sorted_alloc[1:] == sorted_alloc[:-1])
    if repeated.any():
        k = int(np.flatnonzero(repeated)[0])
        first, second = sorted((int(position[order[k]]), int(position[order[k + 1]])))
        what = "allocated" if sorted_alloc[k] else "freed"
        raise InvalidInputError(
            f"'{path}': the trace has address {int(sorted_addr[k]):#x} {what} twice with no "
            f"{'free' if sorted_alloc[k] else 'allocation'} in between (entries {first} and "
            f"{second}). A trace from torch.cuda.memory._snapshot() never does; the file may "
            "mix several traces."
        )
    pair = same & sorted_alloc[:-1] & ~sorted_alloc[1:]
    allocs, frees = order[:-1][pair], order[1:][pair]
    partner[allocs] = frees
    partner[frees] = allocs
    return partner


def _initial_reserved(end_reserved: int, cumulative: I64) -> tuple[int, str | None]:
    total = int(cumulative[-1]) if len(cumulative) else 0
    lowest = int(cumulative.min()) if len(cumulative) else 0
    initial = end_reserved - total
    if initial + min(lowest, 0) >= 0:
        return initial, None
    initial = max(0, -lowest)
    return initial, (
        "the end-state segments do not add up with the trace's segment entries; reserved "
        "memory at the start is taken as the least that keeps it from going negative"
    )


def _end_state_blocks(
    segments: tuple[SegmentInfo, ...], live_at_end: set[int]
) -> list[InitialBlock]:
    return [
        InitialBlock(b.address, b.requested_size, s.stream, None)
        for s in segments
        for b in s.blocks
        if b.allocated and b.address not in live_at_end
    ]


def trace_timeline(snapshot: Snapshot) -> TraceTimeline:
    """Compute the trace's events, pairs, timelines and peaks."""
    t: CollectedTrace = snapshot.trace
    path = str(snapshot.path)
    entry = np.flatnonzero((t.action == ALLOC) | (t.action == FREE)).astype(np.int64)
    is_alloc = t.action[entry] == ALLOC
    addr, size, stream = t.addr[entry], t.size[entry].copy(), t.stream[entry]
    partner = _pairs(addr, is_alloc, t.position[entry], path)
    paired_free = ~is_alloc & (partner >= 0)
    size[paired_free] = size[partner[paired_free]]
    early = np.flatnonzero(~is_alloc & (partner < 0))
    initial = [
        InitialBlock(int(addr[i]), int(size[i]), int(stream[i]), int(i)) for i in early.tolist()
    ]
    never_freed = is_alloc & (partner < 0)
    initial += _end_state_blocks(snapshot.segments, set(addr[never_freed].tolist()))
    initial_requested = sum(b.size for b in initial)
    requested = initial_requested + np.cumsum(np.where(is_alloc, size, -size))

    seg_delta = np.zeros(len(t.action), dtype=np.int64)
    grow = (t.action == SEGMENT_ALLOC) | (t.action == SEGMENT_MAP)
    shrink = (t.action == SEGMENT_FREE) | (t.action == SEGMENT_UNMAP)
    seg_delta[grow] = t.size[grow]
    seg_delta[shrink] = -t.size[shrink]
    cumulative = np.cumsum(seg_delta)
    end_reserved = sum(s.total_size for s in snapshot.segments)
    initial_reserved, note = _initial_reserved(end_reserved, cumulative)
    on_entries = initial_reserved + cumulative
    reserved = on_entries[entry] if len(entry) else np.zeros(0, dtype=np.int64)

    n = len(entry)
    if len(on_entries) and int(on_entries.max()) > initial_reserved:
        peak_entry = int(on_entries.argmax())
        peak_reserved = int(on_entries[peak_entry])
        peak_reserved_event = min(int(np.searchsorted(entry, peak_entry)), max(n - 1, 0))
    else:
        peak_reserved, peak_reserved_event = initial_reserved, 0
    if n and int(requested.max()) > initial_requested:
        peak_requested_event = int(requested.argmax())
        peak_requested = int(requested[peak_requested_event])
    else:
        peak_requested, peak_requested_event = initial_requested, 0

    # empty_cache (or the free-and-retry path): each run of segment frees/unmaps
    run_start = shrink & ~np.concatenate(([False], shrink[:-1]))
    empty_before = np.unique(np.searchsorted(entry, np.flatnonzero(run_start)))
    ooms = tuple(
        OOMEntry(
            event=int(np.searchsorted(entry, k)),
            position=int(t.position[k]),
            size=int(t.size[k]),
            device_free=int(t.addr[k]),
            time_us=int(t.time_us[k]),
        )
        for k in np.flatnonzero(t.action == OOM).tolist()
    )
    return TraceTimeline(
        entry=entry,
        is_alloc=is_alloc,
        addr=addr,
        size=size,
        stream=stream,
        partner=partner,
        requested=requested,
        reserved=reserved,
        initial_requested=initial_requested,
        initial_reserved=initial_reserved,
        initial_blocks=tuple(initial),
        peak_requested=peak_requested,
        peak_requested_event=peak_requested_event,
        peak_reserved=peak_reserved,
        peak_reserved_event=peak_reserved_event,
        empty_cache_before=empty_before.astype(np.int64),
        ooms=ooms,
        notes=(note,) if note else (),
    )
