"""The one vocabulary of memory events shared by trace, allocator, snapshot import and reports.

A trace is an ordered list of :class:`MemoryEvent`: a storage is allocated (``alloc``) or
freed (``free``). ``block`` names the allocation while it is live (a storage id in a predicted
trace, the address in a real snapshot). What made an allocation, and what it is for, lives in
:class:`AllocationInfo`, looked up by ``MemoryEvent.info``; the allocator never needs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Literal

__all__ = ["AllocationInfo", "Category", "EventKind", "MemoryEvent"]

EventKind = Literal["alloc", "free"]


class Category(str, Enum):
    """What an allocation is for. Decides the breakdown at the peak."""

    PARAMETER = "parameter"
    BUFFER = "buffer"
    GRADIENT = "gradient"
    OPTIMIZER_STATE = "optimizer_state"
    INPUT = "input"
    ACTIVATION = "activation"  # saved by autograd for the backward pass
    AUTOCAST_CACHE = "autocast_cache"  # low-precision weight copies kept by autocast
    TEMPORARY = "temporary"  # op outputs and intermediates that are not saved
    WORKSPACE = "workspace"  # cuBLAS / cuDNN / attention kernel scratch

    def label(self) -> str:
        return self.value.replace("_", " ")


@dataclass(frozen=True, slots=True)
class MemoryEvent:
    """One allocation or free, in program order, as the caching allocator sees it."""

    kind: EventKind
    block: int
    size: int  # bytes requested by the caller, before the allocator rounds
    stream: int = 0
    info: int | None = None  # index into the trace's AllocationInfo list (alloc events only)


@dataclass(slots=True)
class AllocationInfo:
    """Where an allocation came from. ``category`` may change (a temporary becomes saved)."""

    category: Category
    op: str
    module: str
    phase: str
    shape: tuple[int, ...] = ()
    dtype: str = ""
