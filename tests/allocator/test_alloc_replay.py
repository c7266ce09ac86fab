"""replay(): per-event stats, peaks, segment events, OOM reporting, input checks, speed."""

from __future__ import annotations

import random

import numpy as np
import pytest

from memfit._errors import InvalidInputError
from memfit._events import MemoryEvent
from memfit.allocator import AllocatorConfig, CachingAllocator, replay

MiB = 1024**2


def alloc(block: int, size: int, stream: int = 0) -> MemoryEvent:
    return MemoryEvent("alloc", block, size, stream)


def free(block: int) -> MemoryEvent:
    return MemoryEvent("free", block, 0)


def test_per_event_stats_and_peaks() -> None:
    events = [alloc(1, 3 * MiB), alloc(2, 30 * MiB), free(1), alloc(3, 100), free(2), free(3)]
    result = replay(events)
    assert result.allocated.tolist() == [
        3 * MiB,
        33 * MiB,
        30 * MiB,
        30 * MiB + 512,
        512,
        0,
    ]
    assert result.reserved.tolist() == [20 * MiB, 50 * MiB, 50 * MiB, 52 * MiB, 52 * MiB, 52 * MiB]
    assert (result.peak_allocated, result.peak_index) == (33 * MiB, 1)
    assert (result.peak_reserved, result.peak_reserved_index) == (52 * MiB, 3)
    assert [e.event_index for e in result.segment_events] == [0, 1, 3]
    assert result.oom is None
    assert result.allocated.dtype == np.int64


def test_replay_matches_the_allocator_class() -> None:
    rng = random.Random(5)
    events, live = [], []
    for block in range(2000):
        if live and rng.random() < 0.5:
            events.append(free(live.pop(rng.randrange(len(live)))))
        else:
            events.append(alloc(block, rng.choice([100, 5 * MiB, 50 * MiB, rng.randint(1, 9**9)])))
            live.append(block)
    config = AllocatorConfig.parse("max_split_size_mb:100,roundup_power2_divisions:4")
    result = replay(events, config)
    a = CachingAllocator(config)
    for i, event in enumerate(events):
        if event.kind == "alloc":
            a.malloc(event.block, event.size)
        else:
            a.free(event.block)
        assert (a.allocated, a.reserved) == (result.allocated[i], result.reserved[i])
    assert a.segments() == result.segments
    assert a.segment_events == result.segment_events


def test_replay_stops_at_the_first_oom() -> None:
    events = [alloc(1, 30 * MiB), alloc(2, 30 * MiB), free(1), alloc(3, 10)]
    result = replay(events, capacity=50 * MiB)
    assert result.num_events == 1
    assert result.oom is not None
    assert (result.oom.index, result.oom.block, result.oom.size) == (1, 2, 30 * MiB)
    assert (result.oom.allocated, result.oom.reserved, result.oom.capacity) == (
        30 * MiB,
        30 * MiB,
        50 * MiB,
    )
    assert "Out of memory" in result.oom.message


def test_zero_byte_allocations_and_streams() -> None:
    result = replay([alloc(1, 0), alloc(2, 30 * MiB, 0), free(2), alloc(3, 30 * MiB, 1), free(1)])
    assert result.reserved.tolist() == [0, 30 * MiB, 30 * MiB, 60 * MiB, 60 * MiB]


@pytest.mark.parametrize(
    ("events", "message"),
    [
        ([free(1)], "event 0 frees block 1, which is not allocated"),
        ([alloc(1, 10), alloc(1, 10)], "event 1 allocates block 1, which is already allocated"),
        ([alloc(1, -1)], "event 0: size -1 is not a byte count"),
        ([MemoryEvent("move", 1, 10)], "kind 'move' is not 'alloc' or 'free'"),  # type: ignore[arg-type]
        ([alloc(1, 10, -2)], "event 0: stream -2 is not >= 0"),
    ],
)
def test_malformed_traces_raise(events: list[MemoryEvent], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        replay(events)


def test_a_long_trace_replays_whole() -> None:
    # how fast is a benchmark's claim (benchmarks/snapshot_speed.py), not a unit test's: a
    # time limit here failed whenever the machine was busy
    rng = random.Random(0)
    sizes = [
        rng.choice(
            [rng.randint(1, MiB), rng.randint(MiB, 10 * MiB), rng.randint(10 * MiB, 200 * MiB)]
        )
        for _ in range(300)
    ]
    events, live = [], []
    while len(events) < 200_000:
        if live and (rng.random() < 0.5 or len(live) > 300):
            events.append(free(live.pop(rng.randrange(len(live)))))
        else:
            events.append(alloc(len(events), rng.choice(sizes)))
            live.append(len(events) - 1)
    result = replay(events)
    assert result.num_events == 200_000
    assert 0 < result.peak_allocated <= result.peak_reserved
