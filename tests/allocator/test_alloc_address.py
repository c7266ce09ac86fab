"""Address spaces: where emulated segments land, and replaying with a real trace's addresses."""

from __future__ import annotations

import pytest

from memfit._errors import InvalidInputError
from memfit.allocator import (
    CachingAllocator,
    ChunkedAddressSpace,
    FirstFitAddressSpace,
    ScriptedAddressSpace,
    TopDownAddressSpace,
    segment_bases_from_trace,
)

MiB = 1024**2


def test_first_fit_reuses_the_lowest_freed_range() -> None:
    space = FirstFitAddressSpace(base=0)
    a, b, c = space.reserve(20 * MiB), space.reserve(40 * MiB), space.reserve(20 * MiB)
    assert (a, b, c) == (0, 20 * MiB, 60 * MiB)
    space.release(b, 40 * MiB)
    assert space.reserve(10 * MiB) == 20 * MiB  # lowest gap that fits, 2 MiB aligned
    assert space.reserve(MiB) == 30 * MiB
    space.release(a, 20 * MiB)
    assert space.reserve(20 * MiB) == 0


def test_first_fit_merges_gaps_and_shrinks_the_top() -> None:
    space = FirstFitAddressSpace(base=0)
    blocks = [space.reserve(2 * MiB) for _ in range(4)]
    for addr in (blocks[1], blocks[2], blocks[3]):
        space.release(addr, 2 * MiB)  # three gaps merge and fall back into the top
    assert space.reserve(6 * MiB) == 2 * MiB


def test_chunks_are_reserved_downward_and_filled_upward() -> None:
    space = ChunkedAddressSpace(chunk=100 * MiB, top=1000 * MiB)
    a, b = space.reserve(20 * MiB), space.reserve(50 * MiB)
    assert (a, b) == (900 * MiB, 920 * MiB)  # one chunk below the top, filled upward
    c = space.reserve(40 * MiB)  # 30 MiB left in the first chunk: a new one below it
    assert c == 800 * MiB
    assert space.reserve(30 * MiB) == 840 * MiB  # first fit: the lowest gap that holds it
    big = space.reserve(300 * MiB)  # larger than a chunk: a chunk of its own size
    assert big == 500 * MiB
    space.release(a, 20 * MiB)
    space.release(b, 50 * MiB)  # merges with a's range and the free ranges around it
    assert space.reserve(60 * MiB) == 870 * MiB


def test_top_down_places_segments_below_at_32_mib_starts() -> None:
    space = TopDownAddressSpace(top=4096 * MiB, window=0)
    a = space.reserve(44 * MiB)  # 4096 - 44 = 4052, start rounded down to 32 MiB
    b = space.reserve(44 * MiB)  # 4032 - 44 = 3988, down to 3968: 64 MiB below a
    assert (a, b) == (4032 * MiB, 3968 * MiB)
    # what the rounding left above each (20 MiB) is reused first fit, the lowest first
    assert space.reserve(16 * MiB) == b + 44 * MiB
    assert space.reserve(20 * MiB) == a + 44 * MiB
    assert space.reserve(20 * MiB) == 3936 * MiB  # no free range holds it: below again
    assert space.reserve(2 * MiB) == 3956 * MiB  # the lowest free range: above the last one
    small = TopDownAddressSpace(top=4096 * MiB, window=0)
    assert [small.reserve(2 * MiB) for _ in range(2)] == [4094 * MiB, 4092 * MiB]  # 2 MiB steps


def test_top_down_gives_a_freed_bottom_back_to_the_space_below() -> None:
    space = TopDownAddressSpace(top=4096 * MiB, window=0)
    space.reserve(2 * MiB)
    a = space.reserve(20 * MiB)
    b = space.reserve(246 * MiB)
    assert (a, b) == (4064 * MiB, 3808 * MiB)
    space.release(b, 246 * MiB)  # the lowest segment: its range and the rest above it are free
    assert space.reserve(20 * MiB) == a - 32 * MiB  # top-down again, not at b
    space.release(a, 20 * MiB)  # not the lowest now: a free range (merged with the 12 MiB
    assert space.reserve(30 * MiB) == a - 12 * MiB  # left above the new one), reused first fit


def test_top_down_frees_the_window_below_the_first_segment_after_the_second() -> None:
    space = TopDownAddressSpace(top=4096 * MiB, window=418 * MiB)
    first = space.reserve(2 * MiB)
    second = space.reserve(250 * MiB)  # below the window
    assert second + 250 * MiB <= first - 418 * MiB
    assert second % (32 * MiB) == 0
    assert space.reserve(20 * MiB) == second + 250 * MiB  # the window is free, lowest first
    assert space.reserve(44 * MiB) == second + 270 * MiB


def test_top_down_runs_out_of_addresses_with_a_clear_error() -> None:
    space = TopDownAddressSpace(top=64 * MiB, window=0)
    with pytest.raises(InvalidInputError, match="address space is exhausted"):
        space.reserve(100 * MiB)


def test_scripted_addresses_come_first_then_the_fallback() -> None:
    space = ScriptedAddressSpace([0x1000_0000, 0x0800_0000], FirstFitAddressSpace(base=1 << 40))
    a = CachingAllocator(address_space=space)
    assert a.malloc(1, 30 * MiB) == 0x1000_0000
    assert a.malloc(2, 30 * MiB) == 0x0800_0000
    assert a.malloc(3, 30 * MiB) == 1 << 40
    a.free(1)
    a.free(2)
    assert a.malloc(4, 30 * MiB) == 0x0800_0000  # equal sizes: the lower address wins


def test_segment_bases_from_a_trace() -> None:
    total = 80 * 1024 * MiB
    trace = [
        ("segment_alloc", 0x7000_0000_0000, 2 * MiB),
        ("alloc", 0x7000_0000_0000, 100),
        ("segment_map", 0x6000_0000_0000, 20 * MiB),  # a new expandable segment
        ("segment_map", 0x6000_0140_0000, 20 * MiB),  # grows the same one
        ("segment_unmap", 0x6000_0000_0000, 40 * MiB),  # all unmapped: released
        ("segment_map", 0x6000_0000_0000, 2 * MiB),  # so this is a new segment again
    ]
    assert segment_bases_from_trace(trace, device_total=total) == [
        0x7000_0000_0000,
        0x6000_0000_0000,
        0x6000_0000_0000,
    ]
    with pytest.raises(InvalidInputError, match="pass device_total"):
        segment_bases_from_trace(trace)
