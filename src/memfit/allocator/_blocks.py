"""Blocks, and the pools of free blocks the allocator searches.

A :class:`Block` is a contiguous piece of a segment, linked to its neighbours in the segment
(``prev``/``next``), as in torch's ``Block``. Object identity follows torch: splitting keeps the
old object for the *remainder* and makes a new one for the part handed out, merging keeps the
block being freed and drops its neighbour. That is why a free block's ``requested`` can be a
stale value, exactly as in torch's snapshots.

A :class:`BlockPool` is torch's ``BlockPool``: the free mapped blocks ordered by
``(stream, size, address)`` (``BlockComparatorSize``), searched by lower bound for best fit,
and, for expandable segments, the unmapped address ranges ordered by ``(stream, address)``
(``BlockComparatorAddress``). Both orders are kept as sorted lists of integer keys packing the
tuple into one int (sizes and addresses below 2**48), which ``bisect`` searches fast.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memfit.allocator._expandable import ExpandableSegment

__all__ = ["ADDRESS_LIMIT", "Block", "BlockPool", "splice", "try_merge"]

_SHIFT = 48
_MASK = (1 << _SHIFT) - 1
ADDRESS_LIMIT = 1 << _SHIFT  # sizes and addresses must stay below this to pack the keys


class Block:
    """A piece of a segment: free or handed out, mapped or (expandable segments) unmapped."""

    __slots__ = (
        "addr",
        "allocated",
        "gc_base",
        "mapped",
        "next",
        "pool",
        "prev",
        "requested",
        "segment",
        "size",
        "stream",
    )

    def __init__(
        self,
        addr: int,
        size: int,
        stream: int,
        pool: BlockPool,
        segment: ExpandableSegment | None = None,
    ) -> None:
        self.addr = addr
        self.size = size
        self.stream = stream
        self.pool = pool
        self.segment = segment  # the expandable segment this block lies in, if any
        self.requested = 0  # bytes asked for when last handed out (stale once free)
        self.allocated = False
        self.mapped = True  # False only for unmapped ranges of expandable segments
        self.prev: Block | None = None
        self.next: Block | None = None
        self.gc_base = 0  # the pool's get_free_block count when the block was cached

    def is_split(self) -> bool:
        """Whether the block shares its segment with other blocks (torch ``is_split``)."""
        return self.prev is not None or self.next is not None


class BlockPool:
    """The free blocks of one pool (small: <= 1 MiB requests, or large)."""

    __slots__ = ("free", "gc_calls", "keys", "small", "unmapped", "unmapped_keys")

    def __init__(self, small: bool) -> None:
        self.small = small
        self.keys: list[int] = []  # sorted (stream, size, addr) keys of free mapped blocks
        self.free: dict[int, Block] = {}  # free mapped blocks by address
        self.unmapped_keys: list[int] = []  # sorted (stream, addr) keys of unmapped ranges
        self.unmapped: dict[int, Block] = {}
        self.gc_calls = 0  # get_free_blocks_call_count: searches while GC is on

    def insert(self, block: Block) -> None:
        """Cache a free block (``insert_into_blocks``: also stamps its GC age)."""
        block.gc_base = self.gc_calls
        insort(self.keys, (block.stream << 96) | (block.size << _SHIFT) | block.addr)
        self.free[block.addr] = block

    def erase(self, block: Block) -> None:
        """Remove a cached free block; its size and address must be those it was cached with."""
        keys = self.keys
        key = (block.stream << 96) | (block.size << _SHIFT) | block.addr
        i = bisect_left(keys, key)
        if i == len(keys) or keys[i] != key:
            raise AssertionError(f"block at {block.addr:#x} is not cached in this pool")
        del keys[i]
        del self.free[block.addr]

    def lower_bound(self, stream: int, size: int) -> int:
        """Index of the first cached block ordered at or after ``(stream, size, 0)``."""
        return bisect_left(self.keys, (stream << 96) | (size << _SHIFT))

    def at(self, index: int) -> Block:
        """The cached block at ``index`` in ``(stream, size, address)`` order."""
        return self.free[self.keys[index] & _MASK]

    def stream_at(self, index: int) -> int:
        return self.keys[index] >> 96

    def insert_unmapped(self, block: Block) -> None:
        insort(self.unmapped_keys, (block.stream << _SHIFT) | block.addr)
        self.unmapped[block.addr] = block

    def erase_unmapped(self, block: Block) -> None:
        keys = self.unmapped_keys
        key = (block.stream << _SHIFT) | block.addr
        i = bisect_left(keys, key)
        if i == len(keys) or keys[i] != key:
            raise AssertionError(f"range at {block.addr:#x} is not unmapped in this pool")
        del keys[i]
        del self.unmapped[block.addr]

    def unmapped_of_stream(self, stream: int) -> list[Block]:
        """The unmapped ranges of ``stream``, by increasing address."""
        keys = self.unmapped_keys
        out = []
        for i in range(bisect_left(keys, stream << _SHIFT), len(keys)):
            if keys[i] >> _SHIFT != stream:
                break
            out.append(self.unmapped[keys[i] & _MASK])
        return out


def splice(block: Block, before: Block | None, after: Block | None) -> None:
    """Link ``block`` between two neighbours (torch ``Block::splice``)."""
    if before is not None:
        before.next = block
    block.prev = before
    if after is not None:
        after.prev = block
    block.next = after


def try_merge(dst: Block, src: Block | None, pool: BlockPool) -> int:
    """Absorb the neighbour ``src`` into ``dst`` if it is free and equally mapped.

    ``try_merge_blocks``: ``dst`` is in no pool set while this runs; ``src`` leaves its set.
    Returns the bytes absorbed (0 if not merged).
    """
    if src is None or src.allocated or src.mapped != dst.mapped:
        return 0
    if dst.prev is src:
        dst.addr = src.addr
        dst.prev = src.prev
        if dst.prev is not None:
            dst.prev.next = dst
    else:
        dst.next = src.next
        if dst.next is not None:
            dst.next.prev = dst
    if src.mapped:
        pool.erase(src)
    else:
        pool.erase_unmapped(src)
    dst.size += src.size
    return src.size
