"""Address spaces: where emulated segments land, and replaying with a real trace's addresses."""

from __future__ import annotations

import pytest

from memfit._errors import InvalidInputError
from memfit.allocator import (
    CachingAllocator,
    ChunkedAddressSpace,
    FirstFitAddressSpace,
    ScriptedAddressSpace,
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
