"""Giving cached memory back to CUDA: ``empty_cache``, the OOM retry path, garbage collection.

Follows ``release_block`` / ``release_blocks`` / ``release_cached_blocks`` /
``release_available_cached_blocks`` / ``garbage_collect_cached_blocks`` of
c10/cuda/CUDACachingAllocator.cpp (torch 2.11-2.14). Only whole free segments are freed
(a free block with no neighbours); expandable segments instead unmap the whole free pages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memfit.allocator._blocks import Block, BlockPool
from memfit.allocator._constants import SIZE_MAX
from memfit.allocator._expandable import release_expandable_segment, unmap_block

if TYPE_CHECKING:
    from memfit.allocator._state import AllocatorState

__all__ = [
    "garbage_collect",
    "release_available_cached_blocks",
    "release_block",
    "release_cached_blocks",
]


def release_block(st: AllocatorState, block: Block) -> None:
    """``cudaFree`` a whole free segment (``release_block``)."""
    assert block.segment is None and not block.is_split()
    st.num_device_free += 1
    st.num_segments -= 1
    st.record("segment_free", block.addr, block.size, block.stream)
    st.space.release(block.addr, block.size)
    st.reserved -= block.size
    block.pool.erase(block)


def _release_blocks(st: AllocatorState, pool: BlockPool) -> None:
    """Free every unsplit cached segment; unmap free pages of expandable ones (``release_blocks``).

    Walks the pool in ``(stream, size, address)`` order, which fixes the order of the
    ``segment_free`` events.
    """
    expandable = []
    for block in [pool.at(i) for i in range(len(pool.keys))]:  # a copy: releasing edits the pool
        if block.segment is not None:
            expandable.append(block)
        elif block.prev is None and block.next is None:
            release_block(st, block)
    for block in expandable:
        unmap_block(st, block)
        if block.prev is None and block.next is None:
            release_expandable_segment(st, block)


def release_cached_blocks(st: AllocatorState) -> bool:
    """Release all that can be released, large pool first (``release_cached_blocks``)."""
    _release_blocks(st, st.large)
    _release_blocks(st, st.small)
    return True


def release_available_cached_blocks(
    st: AllocatorState, pool: BlockPool, size: int, stream: int
) -> bool:
    """Free oversize cached segments until ``size`` bytes are freed (only with max_split_size).

    ``release_available_cached_blocks``: the smallest oversize block of the stream that is at
    least ``max(size, max_split_size)``, else the largest ones downward until enough is freed.
    """
    max_split = st.max_split
    if max_split == SIZE_MAX:
        return False
    target = max(size, max_split)
    index = pool.lower_bound(stream, target)
    if index < len(pool.keys):
        found = pool.at(index)
        if found.stream == stream and found.segment is None:
            release_block(st, found)
            return True
    if index == 0:
        return False
    released = 0
    index -= 1
    while True:
        block = pool.at(index)
        if not (released < target and block.size >= max_split and block.stream == stream):
            break
        if block.segment is None:
            released += block.size
            release_block(st, block)
        if index == 0:
            break
        index -= 1
    return released >= target


def garbage_collect(st: AllocatorState) -> None:
    """Free old unsplit cached large segments once reserved passes the GC threshold.

    ``garbage_collect_cached_blocks``: only with ``per_process_memory_fraction`` < 1. A block's
    age is how many large-pool searches happened since it was cached; blocks at least as old
    as the average are freed, repeatedly, until the excess over the threshold is reclaimed.
    """
    assert st.allowed is not None
    threshold = int(st.gc_threshold * st.allowed)
    if st.reserved <= threshold:
        return
    target = st.reserved - threshold
    pool = st.large
    cached = [pool.at(i) for i in range(len(pool.keys))]
    ages = [pool.gc_calls - b.gc_base for b in cached if not b.is_split()]
    total_age, count = sum(ages), len(ages)
    reclaimed = 0
    freed = True
    while reclaimed < target and freed and count > 0:
        age_threshold = total_age / count
        freed = False
        for block in [pool.at(i) for i in range(len(pool.keys))]:
            age = pool.gc_calls - block.gc_base
            if not block.is_split() and block.segment is None and age >= age_threshold:
                freed = True
                reclaimed += block.size
                total_age -= age
                count -= 1
                release_block(st, block)
