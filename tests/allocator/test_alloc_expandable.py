"""expandable_segments:True: one segment per pool and stream, growing by mapped pages."""

from __future__ import annotations

import pytest

from memfit.allocator import AllocatorOOM, CachingAllocator

MiB = 1024**2
EXPANDABLE = "expandable_segments:True"


def events(a: CachingAllocator) -> list[tuple[str, int, int]]:
    """(action, offset from the first mapped page, size in MiB) of each segment event."""
    base = a.segment_events[0].address
    return [(e.action, (e.address - base) // MiB, e.size // MiB) for e in a.segment_events]


def test_large_pool_maps_20_mib_pages_and_splits_tightly() -> None:
    a = CachingAllocator(EXPANDABLE)
    first = a.malloc(1, 3 * MiB)
    assert (a.allocated, a.reserved) == (3 * MiB, 20 * MiB)  # split: 17 MiB stay free
    # 30 MiB: the free 17 MiB at the end grows by one more page into the unmapped range
    assert a.malloc(2, 30 * MiB) == first + 3 * MiB
    assert events(a) == [("segment_map", 0, 20), ("segment_map", 20, 20)]
    assert (a.allocated, a.reserved) == (33 * MiB, 40 * MiB)
    (segment,) = a.segments()  # one contiguous mapped range
    assert segment.is_expandable and segment.total_size == 40 * MiB
    assert [(b.size // MiB, b.allocated) for b in segment.blocks] == [
        (3, True),
        (30, True),
        (7, False),
    ]


def test_large_requests_map_only_the_pages_they_need() -> None:
    a = CachingAllocator(EXPANDABLE)
    a.malloc(1, 45 * MiB)  # not a 46 MiB segment: ceil(45 / 20) = 3 pages
    assert a.reserved == 60 * MiB
    a.malloc(2, 14 * MiB)  # fits the 15 MiB left on the last page
    assert a.reserved == 60 * MiB


def test_small_pool_maps_2_mib_pages_in_its_own_segment() -> None:
    a = CachingAllocator(EXPANDABLE)
    a.malloc(1, 4096)
    a.malloc(2, 3 * MiB)
    assert a.reserved == 22 * MiB
    assert sorted((s.pool, s.total_size // MiB) for s in a.segments()) == [
        ("large", 20),
        ("small", 2),
    ]


def test_large_segment_size_sets_the_large_page() -> None:
    a = CachingAllocator("expandable_segments:True,large_segment_size_mb:64")
    a.malloc(1, 3 * MiB)
    assert a.reserved == 64 * MiB


def test_empty_cache_unmaps_whole_free_pages_only() -> None:
    a = CachingAllocator(EXPANDABLE)
    a.malloc(1, 3 * MiB)
    a.malloc(2, 30 * MiB)
    a.free(2)  # free block [3 MiB, 40 MiB): only page [20, 40) is wholly free
    a.empty_cache()
    assert events(a)[-1] == ("segment_unmap", 20, 20)
    assert (a.reserved, a.allocated) == (20 * MiB, 3 * MiB)
    a.free(1)
    a.empty_cache()  # the last page goes and the segment is released
    assert events(a)[-1] == ("segment_unmap", 0, 20)
    assert (a.reserved, a.segments()) == (0, [])


def test_holes_are_refilled_before_growing() -> None:
    a = CachingAllocator(EXPANDABLE)
    a.malloc(1, 20 * MiB)  # page 0
    a.malloc(2, 20 * MiB)  # page 1
    a.malloc(3, 20 * MiB)  # page 2
    a.free(2)
    a.empty_cache()  # unmaps page 1: the segment shows as two mapped ranges
    assert len(a.segments()) == 2
    assert a.malloc(4, 20 * MiB) == a.address_of(1) + 20 * MiB  # page 1 again, not page 3
    assert events(a)[-1] == ("segment_map", 20, 20)
    assert len(a.segments()) == 1


def test_best_fit_counts_the_room_a_block_can_grow_into() -> None:
    a = CachingAllocator(EXPANDABLE)
    a.malloc(1, 14 * MiB)  # page 0: [1: 0-14][free 14-20]
    a.malloc(2, 14 * MiB)  # grows by page 1: [2: 14-28][free 28-40], then unmapped space
    a.free(1)  # free 14 MiB at 0, boxed in by block 2
    # 11 MiB: by size the 12 MiB tail comes first, but get_free_block counts the unmapped
    # range after it (it could grow), so the boxed-in 14 MiB block is the better fit
    assert a.malloc(3, 11 * MiB) == a.address_of(2) - 14 * MiB
    assert a.reserved == 40 * MiB


def test_oom_path_unmaps_free_pages_of_other_streams() -> None:
    a = CachingAllocator(EXPANDABLE, capacity=60 * MiB)
    a.malloc(1, 40 * MiB, stream=1)
    a.free(1)  # 40 MiB mapped but free, on stream 1
    a.malloc(2, 30 * MiB, stream=0)  # 40 + 40 > 60: unmap stream 1's pages, retry
    assert a.reserved == 40 * MiB
    assert a.num_alloc_retries == 1
    with pytest.raises(AllocatorOOM):
        a.malloc(3, 30 * MiB, stream=1)  # 40 + 40 > 60 and nothing is free
