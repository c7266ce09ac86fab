"""The allocator's state and its two hot paths: handing out a block and taking it back.

Follows ``DeviceCachingAllocator::malloc`` / ``get_free_block`` / ``alloc_block`` /
``should_split`` / ``alloc_found_block`` / ``free`` / ``free_block`` of
c10/cuda/CUDACachingAllocator.cpp (torch 2.11-2.14), for one device, without CUDA graphs,
private pools or cross-stream ``record_stream`` (so a freed block is reusable at once and
``active`` equals ``allocated``). Counting follows torch's stats: ``allocated`` is the sum of
the handed-out *blocks* (rounded, and whole when not split); ``reserved`` is the sum of
cudaMalloc'd segments plus mapped expandable pages.
"""

from __future__ import annotations

from collections.abc import Iterable

from memfit._errors import InvalidInputError
from memfit.allocator._address import AddressSpace, TopDownAddressSpace
from memfit.allocator._blocks import ADDRESS_LIMIT, Block, BlockPool
from memfit.allocator._config import AllocatorConfig
from memfit.allocator._constants import K_MIN_BLOCK_SIZE, K_SMALL_BUFFER, K_SMALL_SIZE, SIZE_MAX
from memfit.allocator._errors import AllocatorOOM
from memfit.allocator._expandable import ExpandableSegment, try_allocate_expandable_block
from memfit.allocator._release import (
    garbage_collect,
    release_available_cached_blocks,
    release_cached_blocks,
)
from memfit.allocator._rounding import allocation_size, round_size
from memfit.allocator._snapshot import SegmentAction, SegmentEvent, SegmentInfo, take_snapshot

__all__ = ["DEFAULT_VA_TOTAL", "AllocatorState"]

# GPU memory assumed for sizing expandable segments' address ranges when neither capacity nor
# device_total is given; it only decides when a second range would be needed (never, in practice).
DEFAULT_VA_TOTAL = 1 << 37


class AllocatorState:
    """Pools, statistics and segment events of one emulated device allocator."""

    def __init__(
        self,
        config: AllocatorConfig,
        capacity: int | None,
        device_total: int | None,
        address_space: AddressSpace | None,
    ) -> None:
        for name, value in (("capacity", capacity), ("device_total", device_total)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise InvalidInputError(f"{name} {value!r} is not a byte count >= 0.")
        self.config = config
        self.capacity = capacity
        total = device_total if device_total is not None else capacity
        self.allowed: int | None = None  # allowed_memory_maximum
        if config.per_process_memory_fraction < 1.0:
            if total is None:
                raise InvalidInputError(
                    "per_process_memory_fraction limits memory to a fraction of the GPU's "
                    "total; give device_total (or capacity) in bytes so it can be applied."
                )
            self.allowed = int(config.per_process_memory_fraction * total)
        self.gc_threshold = config.garbage_collection_threshold
        self.gc_on = self.allowed is not None and self.gc_threshold > 0.0
        self.max_split = SIZE_MAX if config.max_split_size is None else config.max_split_size
        self.non_split_rounding = config.non_split_rounding
        self.large_segment_size = config.large_segment_size
        self.expandable = config.expandable_segments
        self.divisions = config.roundup_power2_divisions
        self.plain_rounding = all(d <= 1 for d in self.divisions)
        self.va_total = total if total is not None else DEFAULT_VA_TOTAL
        self.space: AddressSpace = address_space or TopDownAddressSpace()
        self.small = BlockPool(True)
        self.large = BlockPool(False)
        self.expandable_segments: list[ExpandableSegment] = []
        self.events: list[SegmentEvent] = []
        self.op = 0  # index of the allocator call in progress, stamped on segment events
        self.allocated = self.reserved = self.requested = 0
        self.peak_allocated = self.peak_reserved = 0
        self.num_segments = self.num_alloc_retries = self.num_ooms = 0
        self.num_device_alloc = self.num_device_free = 0

    def record(self, action: SegmentAction, address: int, size: int, stream: int) -> None:
        self.events.append(SegmentEvent(action, address, size, stream, self.op))

    # -- malloc ---------------------------------------------------------------------------

    def malloc(self, orig: int, stream: int) -> Block:
        """Hand out a block for a request of ``orig`` > 0 bytes, or raise :class:`AllocatorOOM`."""
        if orig >= ADDRESS_LIMIT:
            raise InvalidInputError(f"request of {orig} bytes is beyond any GPU's memory.")
        if self.plain_rounding:
            size = K_MIN_BLOCK_SIZE if orig < K_MIN_BLOCK_SIZE else (orig + 511) & ~511
        else:
            size = round_size(orig, self.divisions)
        if size <= K_SMALL_SIZE:
            pool, alloc_size = self.small, K_SMALL_BUFFER
        else:
            pool, alloc_size = self.large, allocation_size(size, self.large_segment_size)
        block = self._get_free_block(pool, size, stream)
        if block is None:
            block = self._new_block(pool, size, alloc_size, stream, orig)
        return self._hand_out(block, pool, size, orig, stream)

    def _get_free_block(self, pool: BlockPool, size: int, stream: int) -> Block | None:
        """Best fit from the cache: the smallest cached block of the stream that is big enough.

        ``get_free_block``: an oversize block (>= max_split_size) only serves a request that is
        itself oversize and no more than ``max_non_split_rounding`` smaller. In an expandable
        segment a block's size counts the unmapped range after it (room it can grow into).
        """
        if self.gc_on:
            pool.gc_calls += 1
        keys = pool.keys
        index = pool.lower_bound(stream, size)
        if index == len(keys) or keys[index] >> 96 != stream:
            return None
        block = pool.at(index)
        if block.segment is not None:
            grow = _expandable_size(block)
            nxt = index + 1
            while nxt < len(keys) and keys[nxt] >> 96 == stream:
                other = pool.at(nxt)
                other_grow = _expandable_size(other)
                if other_grow >= grow:
                    break
                block, grow, index = other, other_grow, nxt
                if block.segment is None:
                    break
                nxt += 1
        max_split = self.max_split
        if size < max_split and block.size >= max_split:
            return None
        if size >= max_split and block.size >= size + self.non_split_rounding:
            return None
        pool.erase(block)
        return block

    def _new_block(
        self, pool: BlockPool, size: int, alloc_size: int, stream: int, orig: int
    ) -> Block:
        """A new segment, freeing cached memory to make room if needed (``malloc``'s retry path).

        Garbage collection first (if on); then cudaMalloc; then free oversize cached segments
        and retry; then free every whole cached segment and retry once more; else OOM.
        """
        if self.gc_on:
            garbage_collect(self)
        block = self._alloc_block(pool, size, alloc_size, stream, False)
        if block is None and release_available_cached_blocks(self, pool, size, stream):
            block = self._alloc_block(pool, size, alloc_size, stream, False)
        if block is None and release_cached_blocks(self):
            block = self._alloc_block(pool, size, alloc_size, stream, True)
        if block is None:
            self.num_ooms += 1
            raise AllocatorOOM(
                size=orig,
                alloc_size=alloc_size,
                allocated=self.allocated,
                reserved=self.reserved,
                capacity=self.capacity,
                allowed=self.allowed,
            )
        return block

    def _alloc_block(
        self, pool: BlockPool, size: int, alloc_size: int, stream: int, retry: bool
    ) -> Block | None:
        """One attempt to get device memory (``alloc_block``): a segment, or expandable pages.

        The memory-fraction check uses ``alloc_size`` even for expandable segments, which then
        map only the pages ``size`` needs, as torch does.
        """
        if retry:
            self.num_alloc_retries += 1
        if self.allowed is not None and self.reserved + alloc_size > self.allowed:
            return None
        if self.expandable:
            return try_allocate_expandable_block(self, pool, size, stream)
        if self.capacity is not None and self.reserved + alloc_size > self.capacity:
            return None
        address = self.space.reserve(alloc_size)
        block = Block(address, alloc_size, stream, pool)
        self.reserved += alloc_size
        if self.reserved > self.peak_reserved:
            self.peak_reserved = self.reserved
        self.num_segments += 1
        self.num_device_alloc += 1
        self.record("segment_alloc", address, alloc_size, stream)
        return block

    def _hand_out(self, block: Block, pool: BlockPool, size: int, orig: int, stream: int) -> Block:
        """Split off the rest of a too-big block, mark the block allocated, count it.

        ``should_split``: the small pool and expandable segments split whenever >= 512 bytes
        remain; otherwise the large pool splits only below max_split_size and when more than
        1 MiB (kSmallSize) remains. ``alloc_found_block``: the new object is the handed-out
        front part, the old object stays cached as the remainder.
        """
        remaining = block.size - size
        if pool.small or self.expandable:
            split = remaining >= K_MIN_BLOCK_SIZE
        else:
            split = size < self.max_split and remaining > K_SMALL_SIZE
        if split:
            rest = block
            block = Block(rest.addr, size, stream, pool, rest.segment)
            block.prev = rest.prev
            if block.prev is not None:
                block.prev.next = block
            block.next = rest
            rest.prev = block
            rest.addr += size
            rest.size = remaining
            pool.insert(rest)
        block.allocated = True
        block.requested = orig
        self.allocated += block.size
        if self.allocated > self.peak_allocated:
            self.peak_allocated = self.allocated
        self.requested += orig
        return block

    # -- free -----------------------------------------------------------------------------

    def free(self, block: Block) -> None:
        """Take a block back and cache it, merged with free neighbours (``free``/``free_block``)."""
        block.allocated = False
        self.allocated -= block.size
        self.requested -= block.requested
        pool = block.pool
        prev, nxt = block.prev, block.next
        if prev is not None and not prev.allocated and prev.mapped:
            _absorb_prev(block, prev, pool)
        if nxt is not None and not nxt.allocated and nxt.mapped:
            _absorb_next(block, nxt, pool)
        pool.insert(block)

    def largest_free_block(self) -> int:
        """Size of the largest cached free block in either pool (``cacheInfo``), 0 if none."""
        sizes = [b.size for pool in (self.small, self.large) for b in pool.free.values()]
        return max(sizes, default=0)

    def segments(self, live: Iterable[Block | None]) -> list[SegmentInfo]:
        """All segments and their blocks, by address, given the handed-out blocks (``live``;
        None stands for a zero-byte allocation)."""
        blocks = [b for pool in (self.small, self.large) for b in pool.free.values()]
        blocks.extend(b for b in live if b is not None)
        return take_snapshot(blocks)

    def reset_peaks(self) -> None:
        self.peak_allocated = self.allocated
        self.peak_reserved = self.reserved


def _expandable_size(block: Block) -> int:
    """A block's size plus the unmapped range right after it (room to grow)."""
    nxt = block.next
    if nxt is not None and not nxt.mapped:
        return block.size + nxt.size
    return block.size


def _absorb_prev(block: Block, prev: Block, pool: BlockPool) -> None:
    """``try_merge_blocks(block, prev)`` for a free mapped ``prev`` (inlined: hot path)."""
    pool.erase(prev)
    block.addr = prev.addr
    block.prev = prev.prev
    if prev.prev is not None:
        prev.prev.next = block
    block.size += prev.size


def _absorb_next(block: Block, nxt: Block, pool: BlockPool) -> None:
    """``try_merge_blocks(block, next)`` for a free mapped ``next``."""
    pool.erase(nxt)
    block.next = nxt.next
    if nxt.next is not None:
        nxt.next.prev = block
    block.size += nxt.size
