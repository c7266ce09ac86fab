"""Pools, splitting, best fit, merging and reuse of the emulated caching allocator.

Each expected number follows from a rule of c10/cuda/CUDACachingAllocator.cpp, spelled out
next to it, and is chosen so that getting the rule wrong changes the number.
"""

from __future__ import annotations

import pytest

from memfit._errors import InvalidInputError
from memfit.allocator import CachingAllocator, SegmentInfo

MiB = 1024**2


def seg_sizes(a: CachingAllocator) -> list[int]:
    return [s.total_size for s in a.segments()]


def actions(a: CachingAllocator) -> list[tuple[str, int]]:
    return [(e.action, e.size) for e in a.segment_events]


def blocks(segment: SegmentInfo) -> list[tuple[int, int, bool]]:
    """(offset in segment, size, allocated) of each block."""
    return [(b.address - segment.address, b.size, b.allocated) for b in segment.blocks]


def test_small_request_gets_a_2_mib_small_segment_and_512_byte_block() -> None:
    a = CachingAllocator()
    a.malloc(1, 1)
    assert (a.allocated, a.requested, a.reserved) == (512, 1, 2 * MiB)
    (segment,) = a.segments()
    assert segment.pool == "small"
    assert blocks(segment) == [(0, 512, True), (512, 2 * MiB - 512, False)]


def test_1_mib_is_small_and_one_byte_more_is_large() -> None:
    a = CachingAllocator()
    a.malloc(1, MiB)
    a.malloc(2, MiB)  # the other half of the same 2 MiB segment
    a.malloc(3, MiB + 1)  # rounds to 1 MiB + 512: large pool, 20 MiB segment
    assert actions(a) == [("segment_alloc", 2 * MiB), ("segment_alloc", 20 * MiB)]
    assert a.allocated == 2 * MiB + MiB + 512
    assert sorted(s.pool for s in a.segments()) == ["large", "small"]  # by address: any order


def test_large_requests_below_10_mib_share_a_20_mib_segment() -> None:
    a = CachingAllocator()
    for block in range(4):
        a.malloc(block, 4 * MiB)  # 4 x 4 MiB fit in one 20 MiB segment
    a.malloc(4, 5 * MiB)  # 4 MiB left: a second 20 MiB segment
    assert seg_sizes(a) == [20 * MiB, 20 * MiB]
    assert a.allocated == 21 * MiB


def test_requests_of_10_mib_and_more_get_their_own_2_mib_rounded_segment() -> None:
    a = CachingAllocator()
    a.malloc(1, 10 * MiB)
    a.malloc(2, 10 * MiB + 1)
    assert actions(a) == [("segment_alloc", 10 * MiB), ("segment_alloc", 12 * MiB)]
    # 12 MiB - (10 MiB + 512) is just under 2 MiB, > 1 MiB: the block is split
    assert a.allocated == 20 * MiB + 512


def test_large_pool_splits_only_when_more_than_1_mib_remains() -> None:
    a = CachingAllocator()
    a.malloc(1, 19 * MiB)  # 20 MiB segment, remainder exactly 1 MiB: not split
    assert a.allocated == 20 * MiB  # the whole block counts as allocated
    a.malloc(2, 18 * MiB + 512 * 1024)  # remainder 1.5 MiB: split
    assert a.allocated == 20 * MiB + 18 * MiB + 512 * 1024
    assert sorted(len(s.blocks) for s in a.segments()) == [1, 2]


def test_small_pool_splits_down_to_512_bytes() -> None:
    a = CachingAllocator()
    for block in range(4096):  # 4096 x 512 B = one 2 MiB segment, fully split
        a.malloc(block, 100)
    assert seg_sizes(a) == [2 * MiB]
    assert len(a.segments()[0].blocks) == 4096
    a.malloc(4096, 100)
    assert seg_sizes(a) == [2 * MiB, 2 * MiB]


def test_best_fit_takes_the_smallest_cached_block_that_fits() -> None:
    a = CachingAllocator()
    for block, mib in ((1, 30), (2, 24), (3, 26)):
        a.malloc(block, mib * MiB)
    for block in (1, 2, 3):
        a.free(block)
    a.malloc(4, 25 * MiB)  # fits 26 and 30: takes 26, remainder 1 MiB is not split
    assert a.allocated == 26 * MiB
    a.malloc(5, 23 * MiB)  # takes 24
    assert a.allocated == 50 * MiB
    a.malloc(6, 31 * MiB)  # nothing cached fits: new segment
    assert a.reserved == 80 * MiB + 32 * MiB


def test_equal_sizes_are_taken_lowest_address_first() -> None:
    a = CachingAllocator()
    a.malloc(1, 40 * MiB)
    a.malloc(2, 40 * MiB)
    low = min(a.address_of(1), a.address_of(2))
    a.free(2)
    a.free(1)
    assert a.malloc(3, 40 * MiB) == low


def test_freed_blocks_merge_with_free_neighbours() -> None:
    a = CachingAllocator()
    for block in (1, 2, 3):
        a.malloc(block, 4 * MiB)  # one 20 MiB segment: [1][2][3][8 MiB free]
    a.free(2)
    (segment,) = a.segments()
    assert blocks(segment) == [
        (0, 4 * MiB, True),
        (4 * MiB, 4 * MiB, False),
        (8 * MiB, 4 * MiB, True),
        (12 * MiB, 8 * MiB, False),
    ]
    a.free(1)  # merges with 2
    assert blocks(a.segments()[0])[:2] == [(0, 8 * MiB, False), (8 * MiB, 4 * MiB, True)]
    a.free(3)  # merges with both sides: the segment is one free block again
    assert blocks(a.segments()[0]) == [(0, 20 * MiB, False)]
    assert a.largest_free_block() == 20 * MiB


def test_cached_memory_is_reused_without_new_segments() -> None:
    a = CachingAllocator()
    a.malloc(1, 50 * MiB)
    a.free(1)
    a.malloc(2, 50 * MiB)
    a.free(2)
    a.malloc(3, 49 * MiB)  # the 50 MiB block, 1 MiB left: not split
    assert actions(a) == [("segment_alloc", 50 * MiB)]
    assert (a.allocated, a.reserved, a.peak_reserved) == (50 * MiB, 50 * MiB, 50 * MiB)


def test_empty_cache_frees_only_whole_free_segments() -> None:
    a = CachingAllocator()
    a.malloc(1, 4 * MiB)
    a.malloc(2, 4 * MiB)  # same 20 MiB segment
    a.malloc(3, 30 * MiB)
    a.malloc(4, 100)
    a.free(1)
    a.free(3)
    a.free(4)
    a.empty_cache()  # the 30 MiB and the 2 MiB segments go; the split one stays
    assert seg_sizes(a) == [20 * MiB]
    assert a.reserved == 20 * MiB
    assert [e.action for e in a.segment_events].count("segment_free") == 2
    a.free(2)
    a.empty_cache()
    assert a.reserved == 0


def test_streams_do_not_share_cached_blocks() -> None:
    a = CachingAllocator()
    a.malloc(1, 30 * MiB, stream=0)
    a.free(1)
    a.malloc(2, 30 * MiB, stream=1)  # the cached block belongs to stream 0
    assert a.reserved == 60 * MiB
    assert sorted(s.stream for s in a.segments()) == [0, 1]


def test_a_split_remainder_keeps_its_stale_requested_size() -> None:
    """As in torch's snapshots: the old block object becomes the remainder."""
    a = CachingAllocator()
    a.malloc(1, 12 * MiB - 100)
    a.free(1)
    a.malloc(2, 5 * MiB)  # splits the cached 12 MiB block
    (segment,) = a.segments()
    assert [(b.size, b.requested_size, b.allocated) for b in segment.blocks] == [
        (5 * MiB, 5 * MiB, True),
        (7 * MiB, 12 * MiB - 100, False),
    ]


def test_peaks_and_reset() -> None:
    a = CachingAllocator()
    a.malloc(1, 30 * MiB)
    a.malloc(2, 30 * MiB)
    a.free(1)
    assert (a.peak_allocated, a.peak_reserved, a.allocated) == (60 * MiB, 60 * MiB, 30 * MiB)
    a.reset_peak_stats()
    assert a.peak_allocated == 30 * MiB
    assert a.active == a.allocated


def test_zero_byte_allocations_take_no_memory() -> None:
    a = CachingAllocator()
    assert a.malloc(1, 0) == 0
    a.free(1)
    assert (a.reserved, a.segment_events) == (0, [])


def test_misuse_is_reported() -> None:
    a = CachingAllocator()
    a.malloc(1, 10)
    with pytest.raises(InvalidInputError, match="block 1 is already allocated"):
        a.malloc(1, 10)
    with pytest.raises(InvalidInputError, match="block 2 is not allocated"):
        a.free(2)
    with pytest.raises(InvalidInputError, match="size -1 is not a byte count"):
        a.malloc(3, -1)
    with pytest.raises(InvalidInputError, match="not an AllocatorConfig"):
        CachingAllocator(3)  # type: ignore[arg-type]
