"""The one replay of ops through the emulated allocator: :class:`AllocatorReplay`.

Serves every caller that runs a trace through the emulator: :func:`replay` (events to
per-event stats), the estimate and its pressure search (``memfit.estimator``), and the
snapshot report's replays and what-ifs (``memfit.snapshot``). A :class:`AllocatorReplay` takes
:class:`~memfit.allocator.ReplayOps` in one or several batches, under an optional capacity,
and stops at the first allocation that does not fit (:attr:`AllocatorReplay.oom`). A
:class:`Recording` asks for what to write down on the way: allocated (and reserved) bytes
after each event, the segments at one event, samples of the largest free block; a hook is
called after each event.

The loops run once per op, tens of millions of times for a large snapshot, so each way of
running has its own flat loop (peaks only; allocated bytes recorded; everything) with the
allocator's methods bound to locals, and only the general one calls a hook.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, MutableSequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt

from memfit._errors import InvalidInputError
from memfit._events import MemoryEvent
from memfit.allocator._address import AddressSpace
from memfit.allocator._blocks import Block, BlockPool
from memfit.allocator._caching import as_config
from memfit.allocator._config import AllocatorConfig
from memfit.allocator._errors import AllocatorOOM
from memfit.allocator._ops import ALLOC, EMPTY_CACHE, FREE, SETUP, ReplayOps
from memfit.allocator._release import release_cached_blocks
from memfit.allocator._snapshot import SegmentEvent, SegmentInfo
from memfit.allocator._state import AllocatorState

__all__ = ["AllocatorReplay", "OOMInfo", "Recording", "ReplayResult", "replay"]

Step = Iterator[tuple[int, int, int, int]]  # (kind, block, size, stream) of each op
_NOT_LIVE: Final = Block(-1, 0, 0, BlockPool(False))  # what a free of no live block pops


@dataclass(frozen=True)
class OOMInfo:
    """The request that did not fit, and the allocator's state when it failed."""

    index: int  # event index of the failed allocation (of the next event, for a setup op)
    block: int
    size: int  # bytes requested
    alloc_size: int  # the segment the allocator tried to get
    allocated: int
    reserved: int
    capacity: int | None
    message: str


@dataclass
class Recording:
    """What a replay writes down after each event (across :meth:`AllocatorReplay.run` calls).

    ``allocated`` (and ``reserved``, when given) grow by one value per event. The peak
    indices, kept only when ``reserved`` is recorded (or a hook given), are the first events
    at which torch's peak statistics reached their final values (-1 if never raised). With
    ``capture_event``, ``captured`` is the segments after that event; with ``sample_every``,
    ``samples`` holds ``(event, largest free block)`` at every ``sample_every``-th event
    (and at ``capture_event``).
    """

    allocated: MutableSequence[int] = field(default_factory=list)
    reserved: MutableSequence[int] | None = None
    capture_event: int | None = None
    sample_every: int = 0
    captured: list[SegmentInfo] = field(default_factory=list)
    samples: list[tuple[int, int]] = field(default_factory=list)
    peak_allocated_index: int = -1
    peak_reserved_index: int = -1

    def next_stop(self, event: int) -> int:
        """The first event after ``event`` to capture or sample at; -1 if none."""
        stops = []
        if self.capture_event is not None and self.capture_event > event:
            stops.append(self.capture_event)
        if self.sample_every > 0:
            stops.append((event // self.sample_every + 1) * self.sample_every)
        return min(stops, default=-1)


class _Malformed(Exception):
    """An op the live blocks cannot take; ``rest`` is its message after ``event N``."""

    def __init__(self, rest: str) -> None:
        super().__init__(rest)
        self.rest = rest


class AllocatorReplay:
    """Ops run through a fresh emulated allocator, batch after batch (:meth:`run`).

    ``capacity``, ``device_total`` and ``address_space`` are those of
    :class:`~memfit.allocator.CachingAllocator`. After the first allocation that does not fit
    (after torch's free-and-retry path), :attr:`oom` says which and further batches are
    ignored. A malformed op (a free of a block that is not live, an alloc of a live one)
    raises ``InvalidInputError`` naming its event, and ends the replay too.
    """

    def __init__(
        self,
        config: AllocatorConfig | str | None = None,
        capacity: int | None = None,
        *,
        device_total: int | None = None,
        address_space: AddressSpace | None = None,
    ) -> None:
        self._st = AllocatorState(as_config(config), capacity, device_total, address_space)
        self._live: dict[int, Block | None] = {}  # None: a zero-byte allocation (no block)
        self.events = 0  # events applied
        self.oom: OOMInfo | None = None
        self.error: str | None = None  # why a malformed op ended the replay

    @property
    def stopped(self) -> bool:
        """Whether an OOM or a malformed op ended the replay."""
        return self.oom is not None or self.error is not None

    def run(
        self,
        ops: ReplayOps,
        *,
        record: Recording | None = None,
        hook: Callable[[int], None] | None = None,
    ) -> bool:
        """Apply ``ops``; False if the replay has stopped (at an OOM, now or before).

        ``record`` writes down what it asks for; ``hook(event)`` is called after each event
        (the allocator's state readable through this object).
        """
        if self.stopped:
            return False
        steps = zip(ops.kind, ops.block, ops.size, ops.stream, strict=False)
        try:
            if hook is not None or (record is not None and record.reserved is not None):
                self._run_general(steps, record or Recording(), hook, record is not None)
            elif record is not None:
                self._run_allocated(steps, record)
            else:
                self._run_peaks(steps)
        except (AllocatorOOM, _Malformed, InvalidInputError) as err:
            position = len(ops) - 1 - sum(1 for _ in steps)  # steps stopped after that op
            self.events += ops.events_before(position)
            if isinstance(err, AllocatorOOM):
                self.oom = _oom_info(self.events, ops, position, err)
                return False
            # malformed, or a request beyond any GPU's memory
            self.error = (
                f"event {self.events}{err.rest}" if isinstance(err, _Malformed) else str(err)
            )
            raise InvalidInputError(self.error) from None
        self.events += ops.num_events
        if ops.invalid is not None:
            self.error = ops.invalid
            raise InvalidInputError(self.error)
        return True

    # -- the loops: one per way of running, kept flat ------------------------------------

    def _run_peaks(self, steps: Step) -> None:
        """Apply the ops, recording nothing: the fastest loop (it leaves the segment events'
        ``event_index`` unset)."""
        st, live = self._st, self._live
        malloc, free, pop = st.malloc, st.free, live.pop
        for kind, block, size, stream in steps:
            if kind == FREE:
                found = pop(block, _NOT_LIVE)
                if found is not None:
                    if found is _NOT_LIVE:
                        raise _Malformed(_not_live(block))
                    free(found)
            elif kind == ALLOC or kind == SETUP:  # noqa: SIM109 (faster than building a tuple)
                if size > 0 and stream >= 0 and block not in live:
                    live[block] = malloc(size, stream)
                else:
                    _odd_alloc(live, block, size, stream)
            elif kind == EMPTY_CACHE:
                release_cached_blocks(st)
            else:
                raise _Malformed(_unknown(kind))

    def _run_allocated(self, steps: Step, rec: Recording) -> None:
        """Apply the ops, recording allocated bytes after each event, the capture, samples."""
        st, live = self._st, self._live
        malloc, free, pop = st.malloc, st.free, live.pop
        keep = rec.allocated.append
        event = self.events - 1
        stop = rec.next_stop(event)
        for kind, block, size, stream in steps:
            if kind == FREE:
                event += 1
                st.op = event
                found = pop(block, _NOT_LIVE)
                if found is not None:
                    if found is _NOT_LIVE:
                        raise _Malformed(_not_live(block))
                    free(found)
            elif kind == ALLOC:
                event += 1
                st.op = event
                if size > 0 and stream >= 0 and block not in live:
                    live[block] = malloc(size, stream)
                else:
                    _odd_alloc(live, block, size, stream)
            elif kind == SETUP:
                st.op = event + 1
                if size > 0 and stream >= 0 and block not in live:
                    live[block] = malloc(size, stream)
                else:
                    _odd_alloc(live, block, size, stream)
                continue
            elif kind == EMPTY_CACHE:
                st.op = event + 1
                release_cached_blocks(st)
                continue
            else:
                raise _Malformed(_unknown(kind))
            keep(st.allocated)
            if event == stop:
                self._stop(rec, event)
                stop = rec.next_stop(event)

    def _run_general(
        self, steps: Step, rec: Recording, hook: Callable[[int], None] | None, series: bool
    ) -> None:
        """Apply the ops, recording what ``rec`` asks for (its series only if ``series``),
        and calling ``hook``."""
        st, live = self._st, self._live
        malloc, free, pop = st.malloc, st.free, live.pop
        keep = rec.allocated.append if series else None
        keep_reserved = rec.reserved.append if series and rec.reserved is not None else None
        peak_a, peak_r = st.peak_allocated, st.peak_reserved
        event = self.events - 1
        stop = rec.next_stop(event)
        for kind, block, size, stream in steps:
            if kind == FREE:
                event += 1
                st.op = event
                found = pop(block, _NOT_LIVE)
                if found is not None:
                    if found is _NOT_LIVE:
                        raise _Malformed(_not_live(block))
                    free(found)
            elif kind == ALLOC or kind == SETUP:  # noqa: SIM109 (faster than building a tuple)
                st.op = event + 1
                if size > 0 and stream >= 0 and block not in live:
                    live[block] = malloc(size, stream)
                else:
                    _odd_alloc(live, block, size, stream)
                if kind == SETUP:
                    continue
                event += 1
            elif kind == EMPTY_CACHE:
                st.op = event + 1
                release_cached_blocks(st)
                continue
            else:
                raise _Malformed(_unknown(kind))
            if keep is not None:
                keep(st.allocated)
            if keep_reserved is not None:
                keep_reserved(st.reserved)
                if st.peak_allocated != peak_a:
                    peak_a, rec.peak_allocated_index = st.peak_allocated, event
                if st.peak_reserved != peak_r:
                    peak_r, rec.peak_reserved_index = st.peak_reserved, event
            if event == stop:
                self._stop(rec, event)
                stop = rec.next_stop(event)
            if hook is not None:
                hook(event)

    def _stop(self, rec: Recording, event: int) -> None:
        """Capture and sample at ``event``, as ``rec`` asks."""
        if event == rec.capture_event:
            rec.captured = self.segments()
        if rec.sample_every and (event % rec.sample_every == 0 or event == rec.capture_event):
            rec.samples.append((event, self._st.largest_free_block()))

    # -- the allocator's state ------------------------------------------------------------

    @property
    def config(self) -> AllocatorConfig:
        return self._st.config

    @property
    def allocated(self) -> int:
        """Bytes of handed-out blocks now."""
        return self._st.allocated

    @property
    def reserved(self) -> int:
        """Bytes held from CUDA now."""
        return self._st.reserved

    @property
    def peak_allocated(self) -> int:
        return self._st.peak_allocated

    @property
    def peak_reserved(self) -> int:
        """torch's peak: can pass every per-event value (memory mapped and released inside
        one event, on the OOM retry path)."""
        return self._st.peak_reserved

    @property
    def num_alloc_retries(self) -> int:
        """Times every cached segment was freed to retry a failed allocation."""
        return self._st.num_alloc_retries

    @property
    def segment_events(self) -> list[SegmentEvent]:
        """Every segment event so far, in order (the replay's own list: read it, do not edit
        it). ``event_index`` is the event that caused it, in batches that record or hook."""
        return self._st.events

    def address_of(self, block: int) -> int:
        """The address of a live allocation (0 for a zero-byte one)."""
        if block not in self._live:
            raise InvalidInputError(f"block {block} is not allocated.")
        found = self._live[block]
        return 0 if found is None else found.addr

    def largest_free_block(self) -> int:
        """Size of the largest cached free block, 0 if none."""
        return self._st.largest_free_block()

    def segments(self) -> list[SegmentInfo]:
        """All segments and their blocks now, by address."""
        return self._st.segments(self._live.values())


def _oom_info(index: int, ops: ReplayOps, position: int, err: AllocatorOOM) -> OOMInfo:
    return OOMInfo(
        index=index,
        block=ops.block[position],
        size=ops.size[position],
        alloc_size=err.alloc_size,
        allocated=err.allocated,
        reserved=err.reserved,
        capacity=err.capacity,
        message=str(err),
    )


def _odd_alloc(live: dict[int, Block | None], block: int, size: int, stream: int) -> None:
    """Take a zero-byte allocation (no memory, as in torch); raise for a malformed one."""
    if size < 0:
        raise _Malformed(f": size {size!r} is not a byte count.")
    if stream < 0:
        raise _Malformed(f": stream {stream!r} is not >= 0.")
    if block in live:
        raise _Malformed(f" allocates block {block}, which is already allocated.")
    live[block] = None


def _not_live(block: int) -> str:
    return f" frees block {block}, which is not allocated at that point."


def _unknown(kind: int) -> str:
    return f": op kind {kind!r} is not ALLOC, FREE, EMPTY_CACHE or SETUP."


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
    of a block that is not live, an alloc of a live one) raise ``InvalidInputError``. Built for
    long traces: a million events take a few seconds.
    """
    run = AllocatorReplay(config, capacity, device_total=device_total, address_space=address_space)
    rec = Recording(reserved=[])
    run.run(ReplayOps.from_events(events), record=rec)
    return ReplayResult(
        peak_allocated=run.peak_allocated,
        peak_reserved=run.peak_reserved,
        peak_index=rec.peak_allocated_index,
        peak_reserved_index=rec.peak_reserved_index,
        allocated=np.array(rec.allocated, dtype=np.int64),
        reserved=np.array(rec.reserved, dtype=np.int64),
        segment_events=run.segment_events,
        segments=run.segments(),
        oom=run.oom,
    )
