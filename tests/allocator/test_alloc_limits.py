"""max_split_size, the free-and-retry path, OOM, memory fraction and garbage collection."""

from __future__ import annotations

import pytest

from memfit._errors import InvalidInputError
from memfit.allocator import AllocatorOOM, CachingAllocator

MiB = 1024**2


def actions(a: CachingAllocator) -> list[tuple[str, int]]:
    return [(e.action, e.size // MiB) for e in a.segment_events]


def cached_oversize(config: str, capacity: int | None = None) -> CachingAllocator:
    """100 MiB and 120 MiB oversize blocks cached (max_split_size 64 MiB)."""
    a = CachingAllocator(config, capacity)
    a.malloc(1, 100 * MiB)
    a.malloc(2, 120 * MiB)
    a.free(1)
    a.free(2)
    return a


def test_oversize_blocks_do_not_serve_small_requests() -> None:
    a = cached_oversize("max_split_size_mb:64")
    a.malloc(3, 30 * MiB)  # 30 < 64 and the cached blocks are >= 64: new segment
    assert actions(a)[-1] == ("segment_alloc", 30)


def test_oversize_blocks_serve_requests_within_20_mib_unsplit() -> None:
    a = cached_oversize("max_split_size_mb:64")
    a.malloc(3, 90 * MiB)  # 100 < 90 + 20: reused whole, not split
    assert a.allocated == 100 * MiB
    a.malloc(4, 70 * MiB)  # 120 >= 70 + 20: not reused
    assert actions(a)[-1] == ("segment_alloc", 70)


def test_oversize_reuse_window_excludes_its_end() -> None:
    a = cached_oversize("max_split_size_mb:64")
    a.malloc(3, 80 * MiB)  # the 100 MiB block: 100 >= 80 + 20, so not reused
    assert actions(a)[-1] == ("segment_alloc", 80)


def test_max_non_split_rounding_widens_the_reuse_window() -> None:
    a = cached_oversize("max_split_size_mb:64,max_non_split_rounding_mb:60")
    a.malloc(4, 70 * MiB)  # 100 < 70 + 60: reused
    assert (a.allocated, len(actions(a))) == (100 * MiB, 2)


def test_blocks_below_max_split_size_still_split() -> None:
    a = CachingAllocator("max_split_size_mb:64")
    a.malloc(1, 60 * MiB)
    a.free(1)
    a.malloc(2, 20 * MiB)
    assert a.allocated == 20 * MiB


def test_failed_cudamalloc_frees_all_cached_segments_and_retries() -> None:
    a = CachingAllocator(capacity=50 * MiB)
    a.malloc(1, 30 * MiB)
    a.free(1)
    a.malloc(2, 40 * MiB)  # 30 + 40 > 50: free the cached 30 MiB, retry
    assert actions(a) == [("segment_alloc", 30), ("segment_free", 30), ("segment_alloc", 40)]
    assert (a.reserved, a.num_alloc_retries, a.peak_reserved) == (40 * MiB, 1, 40 * MiB)


def test_oom_when_nothing_can_be_freed() -> None:
    a = CachingAllocator(capacity=50 * MiB)
    a.malloc(1, 40 * MiB)
    a.malloc(2, 100)  # 40 + 2 MiB small segment still fits
    with pytest.raises(AllocatorOOM, match=r"tried to allocate 20\.00 MiB") as info:
        a.malloc(3, 20 * MiB - 7)
    err = info.value
    assert (err.size, err.alloc_size, err.allocated) == (20 * MiB - 7, 20 * MiB, 40 * MiB + 512)
    assert (err.reserved, err.capacity, a.num_ooms) == (42 * MiB, 50 * MiB, 1)


def test_oom_path_frees_cached_segments_before_failing() -> None:
    a = CachingAllocator(capacity=50 * MiB)
    a.malloc(1, 30 * MiB)
    a.malloc(2, 10 * MiB)
    a.free(2)
    with pytest.raises(AllocatorOOM):
        a.malloc(3, 30 * MiB)
    assert a.reserved == 30 * MiB  # the cached 10 MiB segment was released on the way


def test_with_max_split_size_one_oversize_block_is_freed_first() -> None:
    # 220 MiB cached; a 30 MiB segment needs room: release_available_cached_blocks frees the
    # smallest oversize block that covers max(size, max_split_size) = 64 MiB, i.e. the 100 MiB
    a = cached_oversize("max_split_size_mb:64", capacity=240 * MiB)
    a.malloc(3, 30 * MiB)
    assert actions(a)[2:] == [("segment_free", 100), ("segment_alloc", 30)]
    assert (a.reserved, a.num_alloc_retries) == (150 * MiB, 0)


def test_with_max_split_size_largest_oversize_blocks_go_until_enough() -> None:
    # no single cached block >= 150 MiB: free the largest (120), then the next (100)
    a = cached_oversize("max_split_size_mb:64", capacity=240 * MiB)
    a.malloc(3, 150 * MiB)
    assert actions(a)[2:] == [("segment_free", 120), ("segment_free", 100), ("segment_alloc", 150)]
    assert a.num_alloc_retries == 0


def test_memory_fraction_caps_reserved_memory() -> None:
    a = CachingAllocator("per_process_memory_fraction:0.5", device_total=100 * MiB)
    a.malloc(1, 40 * MiB)
    with pytest.raises(AllocatorOOM, match=r"50\.00 MiB allowed by per_process_memory_fraction"):
        a.malloc(2, 12 * MiB)  # 40 + 12 > 50
    a.malloc(3, 10 * MiB)  # 40 + 10 = 50 fits


def test_memory_fraction_is_checked_against_the_whole_segment() -> None:
    # a 3 MiB request asks cudaMalloc for a 20 MiB segment: 40 + 20 > 50 fails, though
    # 3 MiB would fit
    a = CachingAllocator("per_process_memory_fraction:0.5", device_total=100 * MiB)
    a.malloc(1, 40 * MiB)
    with pytest.raises(AllocatorOOM):
        a.malloc(2, 3 * MiB)


def test_memory_fraction_with_expandable_segments_checks_the_request_not_the_page() -> None:
    # allowed 55 MiB: 40 + 12 <= 55 passes the check, then a whole 20 MiB page is mapped
    config = "expandable_segments:True,per_process_memory_fraction:0.5"
    a = CachingAllocator(config, device_total=110 * MiB)
    a.malloc(1, 40 * MiB)
    a.malloc(2, 12 * MiB)
    assert a.reserved == 60 * MiB  # over the 55 MiB allowed, as in torch


def test_memory_fraction_needs_a_total() -> None:
    with pytest.raises(InvalidInputError, match="give device_total"):
        CachingAllocator("per_process_memory_fraction:0.5")


def test_garbage_collection_frees_the_oldest_cached_segments() -> None:
    # allowed 100 MiB, GC above 50 MiB. Ages count large-pool searches since a block was cached.
    a = CachingAllocator(
        "garbage_collection_threshold:0.5,per_process_memory_fraction:0.5",
        device_total=200 * MiB,
    )
    a.malloc(1, 30 * MiB)  # search 1
    a.free(1)  # cached at search 1
    a.malloc(2, 30 * MiB)  # search 2 reuses it
    a.free(2)  # cached again at search 2
    a.malloc(3, 40 * MiB)  # search 3: no fit; reserved 30 <= 50, no GC; new segment
    a.free(3)  # cached at search 3
    a.malloc(4, 50 * MiB)  # search 4: no fit; reserved 70 > 50: GC must reclaim 20 MiB
    # ages: 30 MiB block 4 - 2 = 2, 40 MiB block 4 - 3 = 1; average 1.5: only the 30 MiB goes
    assert actions(a) == [
        ("segment_alloc", 30),
        ("segment_alloc", 40),
        ("segment_free", 30),
        ("segment_alloc", 50),
    ]
    assert a.reserved == 90 * MiB


def test_garbage_collection_frees_blocks_exactly_as_old_as_the_average() -> None:
    a = CachingAllocator(
        "garbage_collection_threshold:0.5,per_process_memory_fraction:0.5",
        device_total=200 * MiB,
    )
    a.malloc(1, 30 * MiB)
    a.malloc(2, 40 * MiB)
    a.free(1)
    a.free(2)  # both cached after search 2: equal ages, both at the average
    a.malloc(3, 50 * MiB)  # GC frees both, so no retry is needed
    assert actions(a)[2:] == [("segment_free", 30), ("segment_free", 40), ("segment_alloc", 50)]
    assert (a.reserved, a.num_alloc_retries) == (50 * MiB, 0)


def test_no_garbage_collection_without_a_memory_fraction() -> None:
    a = CachingAllocator("garbage_collection_threshold:0.5", capacity=100 * MiB)
    a.malloc(1, 60 * MiB)
    a.free(1)
    a.malloc(2, 30 * MiB)  # the cached block is big enough: split it, nothing freed
    a.malloc(3, 31 * MiB)  # needs a segment: 60 + 32 fits in 100, no GC
    assert [e.action for e in a.segment_events] == ["segment_alloc", "segment_alloc"]
