"""What the emulated allocator reports: segment events and segment snapshots.

Named and shaped like torch's own records so they can be compared directly: a
:class:`SegmentEvent` is a ``segment_alloc`` / ``segment_free`` (``cudaMalloc`` / ``cudaFree``)
or, with expandable segments, a ``segment_map`` / ``segment_unmap`` entry of
``torch.cuda.memory._snapshot()["device_traces"]``; a :class:`SegmentInfo` is one entry of
``_snapshot()["segments"]`` (``DeviceCachingAllocator::snapshot``: with expandable segments,
one entry per contiguous mapped range).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, NamedTuple

from memfit.allocator._blocks import Block

__all__ = ["BlockInfo", "SegmentAction", "SegmentEvent", "SegmentInfo", "take_snapshot"]

SegmentAction = Literal["segment_alloc", "segment_free", "segment_map", "segment_unmap"]


class SegmentEvent(NamedTuple):
    """Reserved memory changed: a segment was allocated, freed, mapped or unmapped.

    ``event_index`` is the allocator call that caused it (the event index in :func:`replay`).
    """

    action: SegmentAction
    address: int
    size: int
    stream: int
    event_index: int


@dataclass(frozen=True, slots=True)
class BlockInfo:
    """One block of a segment, as in a snapshot's ``blocks`` list.

    ``requested_size`` of a free block is whatever torch would show: the request it last
    served (possibly stale, or 0 for a block that was never handed out).
    """

    address: int
    size: int
    requested_size: int
    allocated: bool


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """One segment (or contiguous mapped range of an expandable segment) and its blocks."""

    address: int
    total_size: int
    stream: int
    pool: Literal["small", "large"]
    is_expandable: bool
    blocks: tuple[BlockInfo, ...]

    @property
    def allocated_size(self) -> int:
        """Bytes of the segment's blocks that are handed out."""
        return sum(b.size for b in self.blocks if b.allocated)

    @property
    def requested_size(self) -> int:
        """Bytes the callers asked for in the handed-out blocks."""
        return sum(b.requested_size for b in self.blocks if b.allocated)


def take_snapshot(blocks: Iterable[Block]) -> list[SegmentInfo]:
    """Group blocks (all free and all handed-out ones) into segments, by address."""
    segments = []
    for head in blocks:
        if not head.mapped or (head.prev is not None and head.prev.mapped):
            continue
        infos = []
        block: Block | None = head
        while block is not None and block.mapped:
            infos.append(BlockInfo(block.addr, block.size, block.requested, block.allocated))
            block = block.next
        segments.append(
            SegmentInfo(
                address=head.addr,
                total_size=sum(b.size for b in infos),
                stream=head.stream,
                pool="small" if head.pool.small else "large",
                is_expandable=head.segment is not None,
                blocks=tuple(infos),
            )
        )
    segments.sort(key=lambda s: s.address)
    return segments
