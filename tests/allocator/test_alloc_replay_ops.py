"""AllocatorReplay: the one replay loop; its ways of running agree with each other and with
CachingAllocator, across batches, with setup ops, empty_cache, capture, samples, hooks, OOMs."""

from __future__ import annotations

import random
from array import array
from itertools import pairwise

import pytest

from memfit._errors import InvalidInputError
from memfit._events import MemoryEvent
from memfit.allocator import (
    ALLOC,
    EMPTY_CACHE,
    FREE,
    SETUP,
    AllocatorOOM,
    AllocatorReplay,
    CachingAllocator,
    Recording,
    ReplayOps,
)

MiB = 1024**2


def random_ops(seed: int, n: int = 3000) -> ReplayOps:
    """Setup allocations, then allocations and frees with an empty_cache now and then."""
    rng = random.Random(seed)
    kind, block, size, stream = [], [], [], []

    def op(k: int, b: int = 0, s: int = 0, st: int = 0) -> None:
        kind.append(k)
        block.append(b)
        size.append(s)
        stream.append(st)

    live = []
    for b in range(5):
        op(SETUP, b, rng.randint(1, 30 * MiB))
        live.append(b)
    for b in range(5, n):
        if rng.random() < 0.02:
            op(EMPTY_CACHE)
        if live and rng.random() < 0.5:
            op(FREE, live.pop(rng.randrange(len(live))))
        else:
            sz = rng.choice([0, 100, 700 * 1024, 5 * MiB, 50 * MiB, rng.randint(1, 9**9)])
            op(ALLOC, b, sz, rng.choice([0, 0, 0, 1]))
            live.append(b)
    return ReplayOps(kind, block, size, stream)


def part(ops: ReplayOps, lo: int, hi: int) -> ReplayOps:
    return ReplayOps(ops.kind[lo:hi], ops.block[lo:hi], ops.size[lo:hi], ops.stream[lo:hi])


def by_hand(ops: ReplayOps, config: str) -> tuple[CachingAllocator, list[int], list[int]]:
    a = CachingAllocator(config)
    allocated, reserved = [], []
    for k, b, s, st in zip(ops.kind, ops.block, ops.size, ops.stream, strict=True):
        if k == EMPTY_CACHE:
            a.empty_cache()
            continue
        if k == FREE:
            a.free(b)
        else:
            a.malloc(b, s, st)
        if k != SETUP:
            allocated.append(a.allocated)
            reserved.append(a.reserved)
    return a, allocated, reserved


@pytest.mark.parametrize("config", ["", "expandable_segments:True", "max_split_size_mb:100"])
def test_every_way_of_running_agrees_with_the_allocator_class(config: str) -> None:
    ops = random_ops(3)
    a, allocated, reserved = by_hand(ops, config)
    peaks = AllocatorReplay(config)
    assert peaks.run(ops)
    only_allocated, rec_allocated = AllocatorReplay(config), Recording(array("q"))
    assert only_allocated.run(ops, record=rec_allocated)
    general, rec_general = AllocatorReplay(config), Recording(reserved=[])
    hooked: list[int] = []
    assert general.run(ops, record=rec_general, hook=hooked.append)
    for run in (peaks, only_allocated, general):
        assert (run.peak_allocated, run.peak_reserved) == (a.peak_allocated, a.peak_reserved)
        assert (run.allocated, run.reserved) == (a.allocated, a.reserved)
        assert run.segments() == a.segments()
        assert [e[:4] for e in run.segment_events] == [e[:4] for e in a.segment_events]
        assert run.events == ops.num_events == len(allocated)
    assert list(rec_allocated.allocated) == rec_general.allocated == allocated
    assert rec_general.reserved == reserved
    assert hooked == list(range(ops.num_events))
    assert rec_general.peak_allocated_index == allocated.index(a.peak_allocated)


def test_batches_continue_the_replay_and_its_event_numbers() -> None:
    ops = random_ops(4)
    whole = AllocatorReplay()
    rec_whole = Recording(reserved=[], capture_event=1234, sample_every=100)
    whole.run(ops, record=rec_whole)
    parts, rec_parts = (
        AllocatorReplay(),
        Recording(reserved=[], capture_event=1234, sample_every=100),
    )
    cut = [0, 7, 1000, 1001, 2500, len(ops)]
    for lo, hi in pairwise(cut):
        assert parts.run(part(ops, lo, hi), record=rec_parts)
    assert rec_parts == rec_whole
    assert parts.segment_events == whole.segment_events
    assert parts.events == whole.events


def test_capture_and_samples() -> None:
    ops = random_ops(5)
    rec = Recording(array("q"), capture_event=777, sample_every=250)
    replay = AllocatorReplay()
    replay.run(ops, record=rec)
    events = list(range(0, ops.num_events, 250))
    assert [e for e, _ in rec.samples] == sorted([*events, 777])
    # the same state, by hand, stopped right after event 777
    stop = next(i for i in range(len(ops)) if ops.events_before(i + 1) == 778)
    a, _, _ = by_hand(part(ops, 0, stop + 1), "")
    assert rec.captured == a.segments()
    assert dict(rec.samples)[777] == a.largest_free_block()


@pytest.mark.parametrize("way", ["peaks", "allocated", "general"])
def test_an_oom_stops_the_replay_and_names_its_event(way: str) -> None:
    kind = [SETUP, ALLOC, EMPTY_CACHE, FREE, ALLOC, ALLOC]
    block = [1, 2, 0, 2, 3, 4]
    size = [10 * MiB, 30 * MiB, 0, 0, 30 * MiB, 30 * MiB]
    ops = ReplayOps(kind, block, size, [0] * 6)
    replay = AllocatorReplay(capacity=50 * MiB)
    rec = {"peaks": None, "allocated": Recording(), "general": Recording(reserved=[])}[way]
    assert not replay.run(ops, record=rec)
    assert replay.oom is not None
    assert (replay.oom.index, replay.oom.block, replay.oom.size) == (3, 4, 30 * MiB)
    assert replay.events == 3
    assert "Out of memory" in replay.oom.message
    if rec is not None:
        assert len(rec.allocated) == 3
    assert not replay.run(ops)  # stopped: nothing more is replayed
    assert replay.events == 3


def test_an_oom_in_a_setup_op_names_the_next_event() -> None:
    ops = ReplayOps([ALLOC, FREE, SETUP], [1, 1, 2], [MiB, 0, 90 * MiB], [0, 0, 0])
    replay = AllocatorReplay(capacity=50 * MiB)
    assert not replay.run(ops)
    assert replay.oom is not None
    assert (replay.oom.index, replay.oom.block) == (2, 2)
    with pytest.raises(AllocatorOOM):
        CachingAllocator(capacity=50 * MiB).malloc(2, 90 * MiB)


@pytest.mark.parametrize("way", ["peaks", "allocated", "general"])
@pytest.mark.parametrize(
    ("kind", "block", "size", "stream", "message"),
    [
        ([ALLOC, EMPTY_CACHE, FREE, FREE], [1, 0, 1, 1], [10, 0, 0, 0], [0] * 4,
         "event 2 frees block 1, which is not allocated at that point"),
        ([SETUP, ALLOC, ALLOC], [1, 2, 1], [10, 10, 10], [0] * 3,
         "event 1 allocates block 1, which is already allocated"),
        ([ALLOC, ALLOC], [1, 2], [10, 0], [0, -1], "event 1: stream -1 is not >= 0"),
        ([ALLOC, ALLOC], [1, 2], [10, -5], [0, 0], "event 1: size -5 is not a byte count"),
        ([ALLOC, 7], [1, 2], [10, 0], [0, 0], "event 1: op kind 7 is not ALLOC"),
    ],
)  # fmt: skip
def test_malformed_ops_raise_and_end_the_replay(
    way: str, kind: list[int], block: list[int], size: list[int], stream: list[int], message: str
) -> None:
    replay = AllocatorReplay()
    rec = {"peaks": None, "allocated": Recording(), "general": Recording(reserved=[])}[way]
    with pytest.raises(InvalidInputError, match=message):
        replay.run(ReplayOps(kind, block, size, stream), record=rec)
    assert replay.error is not None and message in replay.error
    assert replay.stopped and not replay.run(ReplayOps([ALLOC], [9], [10], [0]))


def test_zero_byte_allocations_hold_no_memory() -> None:
    ops = ReplayOps([ALLOC, ALLOC, FREE, FREE], [1, 2, 1, 2], [0, MiB, 0, 0], [0] * 4)
    replay = AllocatorReplay()
    rec = Recording(reserved=[])
    replay.run(ops, record=rec)
    assert rec.allocated == [0, MiB, MiB, 0]


def test_ops_from_events() -> None:
    events = [
        MemoryEvent("alloc", 1, 100),
        MemoryEvent("alloc", 2, 200, 1),
        MemoryEvent("free", 1, 100),
    ]
    ops = ReplayOps.from_events(events, empty_cache_before=2)
    assert list(ops.kind) == [ALLOC, ALLOC, EMPTY_CACHE, FREE]
    assert (list(ops.block), list(ops.size), list(ops.stream)) == (
        [1, 2, 0, 1],
        [100, 200, 0, 0],
        [0, 1, 0, 0],
    )
    assert (ops.num_events, ops.invalid) == (3, None)
    assert ReplayOps.from_events(events, empty_cache_before=3).num_events == 3
    assert list(ReplayOps.from_events(events, empty_cache_before=3).kind) == [ALLOC, ALLOC, FREE]
    bad = ReplayOps.from_events([*events, MemoryEvent("alloc", 3, -1), MemoryEvent("free", 9, 0)])
    assert (len(bad), bad.invalid) == (3, "event 3: size -1 is not a byte count.")
    replay = AllocatorReplay()
    with pytest.raises(InvalidInputError, match="event 3: size -1"):
        replay.run(bad)
    assert replay.events == 3  # the events before it were replayed


def test_op_columns_must_have_one_length() -> None:
    with pytest.raises(ValueError, match="same length"):
        ReplayOps([ALLOC], [1], [10, 20], [0])
