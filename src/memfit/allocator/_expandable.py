"""Expandable segments (``expandable_segments:True``): one growing segment per pool and stream.

Follows ``ExpandableSegment`` and ``find_expandable_block`` / ``map_block`` /
``try_allocate_expandable_block`` / ``unmap_block`` / ``release_expandable_segment`` of
c10/cuda/CUDACachingAllocator.cpp (torch 2.11-2.14). A segment reserves address space for
1.125 x the GPU's memory and maps physical pages on demand: 2 MiB pages in the small pool,
``large_segment_size`` (20 MiB by default) pages in the large pool. Reserved memory is exactly
the mapped pages: a map adds whole pages, an unmap (on ``empty_cache`` or the OOM path) returns
only pages lying wholly inside a free block.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memfit.allocator._blocks import Block, BlockPool, splice, try_merge
from memfit.allocator._constants import K_SMALL_BUFFER

if TYPE_CHECKING:
    from memfit.allocator._state import AllocatorState

__all__ = [
    "ExpandableSegment",
    "release_expandable_segment",
    "try_allocate_expandable_block",
    "unmap_block",
]


class ExpandableSegment:
    """A reserved address range mapped in pages of ``page`` bytes."""

    __slots__ = ("base", "page", "size")

    def __init__(self, base: int, page: int, device_total: int) -> None:
        self.base = base
        self.page = page
        # max_handles_ = numSegments(totalGlobalMem + totalGlobalMem / 8)
        handles = -(-(device_total + device_total // 8) // page)
        self.size = handles * page

    def page_floor(self, addr: int) -> int:
        """``segmentLeft``: index of the page containing ``addr``."""
        return (addr - self.base) // self.page

    def page_ceil(self, addr: int) -> int:
        """``segmentRight``: index of the first page at or after ``addr``."""
        return -(-(addr - self.base) // self.page)


def _allocatable(block: Block | None) -> bool:
    return block is not None and not block.allocated


def _has_room(block: Block | None, size: int) -> bool:
    """Whether free and unmapped blocks from ``block`` on add up to ``size`` bytes."""
    room = 0
    while room < size and block is not None and not block.allocated:
        room += block.size
        block = block.next
    return room >= size


def _find_expandable_block(st: AllocatorState, pool: BlockPool, size: int, stream: int) -> Block:
    """The lowest-addressed run of free/unmapped space that fits ``size``, else a new segment.

    ``find_expandable_block``: starts at each unmapped range of the stream (by address),
    stepping back onto a free block just before it, so holes are filled before growing.
    """
    for candidate in pool.unmapped_of_stream(stream):
        if _allocatable(candidate.prev):
            assert candidate.prev is not None
            candidate = candidate.prev
        if _has_room(candidate, size):
            return candidate
    page = K_SMALL_BUFFER if pool.small else st.large_segment_size
    segment = ExpandableSegment(0, page, st.va_total)
    segment.base = st.space.reserve(segment.size)
    st.expandable_segments.append(segment)
    block = Block(segment.base, segment.size, stream, pool, segment)
    block.mapped = False
    pool.insert_unmapped(block)
    return block


def _map_block(st: AllocatorState, block: Block, size: int) -> bool:
    """Map the pages covering the first ``size`` bytes of an unmapped range (``map_block``).

    All or nothing: if the pages do not fit in ``capacity``, nothing is mapped. The mapped part
    merges with free neighbours and is cached as a free block.
    """
    segment = block.segment
    assert segment is not None
    begin, end = segment.page_floor(block.addr), segment.page_ceil(block.addr + size)
    mapped = (end - begin) * segment.page
    if mapped == 0 or (st.capacity is not None and st.reserved + mapped > st.capacity):
        return False
    pool = block.pool
    address = block.addr
    pool.erase_unmapped(block)
    block.mapped = True
    if mapped < block.size:
        rest = Block(address + mapped, block.size - mapped, block.stream, pool, segment)
        rest.mapped = False
        splice(rest, block, block.next)
        pool.insert_unmapped(rest)
        block.size = mapped
    try_merge(block, block.prev, pool)
    try_merge(block, block.next, pool)
    pool.insert(block)
    st.reserved += mapped
    if st.reserved > st.peak_reserved:
        st.peak_reserved = st.reserved
    st.num_device_alloc += 1
    st.record("segment_map", address, mapped, block.stream)
    return True


def try_allocate_expandable_block(
    st: AllocatorState, pool: BlockPool, size: int, stream: int
) -> Block | None:
    """Map enough pages to give a free block of at least ``size`` bytes, or None (OOM).

    ``try_allocate_expandable_block``. Pages mapped before a failing map stay mapped (and
    reserved) as free cached memory, as in torch.
    """
    candidate = _find_expandable_block(st, pool, size, stream)
    if not candidate.mapped and not _map_block(st, candidate, min(candidate.size, size)):
        return None
    while candidate.size < size:
        following = candidate.next
        assert following is not None
        if not _map_block(st, following, min(size - candidate.size, following.size)):
            return None
        candidate = following
    pool.erase(candidate)
    return candidate


def unmap_block(st: AllocatorState, block: Block) -> None:
    """Unmap the whole pages inside a free block (``unmap_block``); partial pages stay mapped."""
    segment = block.segment
    assert segment is not None
    begin = segment.page_ceil(block.addr)
    end = segment.page_floor(block.addr + block.size)
    if begin >= end:
        return
    pool = block.pool
    pool.erase(block)
    address = segment.base + begin * segment.page
    size = (end - begin) * segment.page
    before = address - block.addr
    if before > 0:
        head = Block(block.addr, before, block.stream, pool, segment)
        splice(head, block.prev, block)
        pool.insert(head)
    after = block.size - before - size
    if after > 0:
        tail = Block(address + size, after, block.stream, pool, segment)
        splice(tail, block, block.next)
        pool.insert(tail)
    block.addr, block.size, block.mapped = address, size, False
    try_merge(block, block.prev, pool)
    try_merge(block, block.next, pool)
    pool.insert_unmapped(block)
    st.reserved -= size
    st.num_device_free += 1
    st.record("segment_unmap", address, size, block.stream)


def release_expandable_segment(st: AllocatorState, block: Block) -> None:
    """Drop a segment that is entirely unmapped (``release_expandable_segment``)."""
    segment = block.segment
    assert segment is not None and not block.mapped and block.size == segment.size
    st.expandable_segments.remove(segment)
    block.pool.erase_unmapped(block)
    st.space.release(segment.base, segment.size)
