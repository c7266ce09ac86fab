"""The error the emulated allocator raises when a request cannot be met: :class:`AllocatorOOM`."""

from __future__ import annotations

from memfit._errors import MemfitError
from memfit._units import format_bytes

__all__ = ["AllocatorOOM"]


class AllocatorOOM(MemfitError):
    """The emulated allocator ran out of memory, after freeing cached segments and retrying.

    Carries the numbers torch's ``OutOfMemoryError`` message reports: what was asked for,
    what is allocated and reserved at that point (after the free-and-retry path released what
    it could), and the limit that was hit.
    """

    def __init__(
        self,
        *,
        size: int,
        alloc_size: int,
        allocated: int,
        reserved: int,
        capacity: int | None,
        allowed: int | None,
    ) -> None:
        self.size = size
        self.alloc_size = alloc_size
        self.allocated = allocated
        self.reserved = reserved
        self.capacity = capacity
        self.allowed = allowed
        limits = []
        if capacity is not None:
            limits.append(f"a capacity of {format_bytes(capacity)}")
        if allowed is not None:
            limits.append(f"{format_bytes(allowed)} allowed by per_process_memory_fraction")
        limit = " and ".join(limits) if limits else "no limit"
        super().__init__(
            f"Out of memory (emulated CUDA caching allocator): tried to allocate "
            f"{format_bytes(alloc_size)} for a request of {size} bytes, with {limit}. "
            f"{format_bytes(allocated)} is allocated and {format_bytes(reserved)} reserved, "
            f"so {format_bytes(reserved - allocated)} is reserved but unallocated."
        )
