"""An exact emulator of PyTorch's CUDA caching allocator, in pure Python.

Reproduces c10/cuda/CUDACachingAllocator.cpp of torch 2.11-2.14 for one device: request
rounding (512 B, or ``roundup_power2_divisions``), the small (<= 1 MiB, 2 MiB segments) and
large pools (20 MiB segments below 10 MiB, else 2 MiB multiples), best fit by
``(stream, size, address)``, splitting and merging, ``max_split_size``, garbage collection,
the free-and-retry path on a failed ``cudaMalloc``, ``empty_cache`` and expandable segments.
Checked against the real allocator (torch 2.11 on an H200): per-operation allocated and
reserved bytes, every segment event and block address, and snapshots match exactly.

Not emulated: CUDA graphs and private memory pools, cross-stream ``record_stream`` (blocks
waiting on events), several devices, ``backend:cudaMallocAsync`` and
``throw_on_cudamalloc_oom``. Where CUDA places new segments is the driver's choice; the
default :class:`TopDownAddressSpace` follows what H200 traces show (each new segment below the
others, 32 MiB aligned; free ranges reused first fit), :class:`ChunkedAddressSpace` and
:class:`FirstFitAddressSpace` are simpler stand-ins, and :class:`ScriptedAddressSpace` replays
a real trace's addresses.

A whole trace runs through :class:`AllocatorReplay` (ops in :class:`ReplayOps`, what to write
down on the way in a :class:`Recording`), the one replay loop behind :func:`replay`, the
estimate and the snapshot report.

>>> from memfit.allocator import CachingAllocator
>>> a = CachingAllocator("expandable_segments:False")
>>> _ = a.malloc(1, 3 * 1024 * 1024)   # 3 MiB: a 20 MiB segment, split
>>> a.allocated, a.reserved
(3145728, 20971520)
"""

from __future__ import annotations

from memfit.allocator._address import (
    AddressSpace,
    ChunkedAddressSpace,
    FirstFitAddressSpace,
    ScriptedAddressSpace,
    TopDownAddressSpace,
    segment_bases_from_trace,
)
from memfit.allocator._caching import CachingAllocator
from memfit.allocator._config import ENV_VARS, AllocatorConfig
from memfit.allocator._errors import AllocatorOOM
from memfit.allocator._ops import ALLOC, EMPTY_CACHE, FREE, SETUP, ReplayOps
from memfit.allocator._replay import AllocatorReplay, OOMInfo, Recording, ReplayResult, replay
from memfit.allocator._rounding import allocation_size, round_size
from memfit.allocator._snapshot import BlockInfo, SegmentEvent, SegmentInfo

__all__ = [
    "ALLOC",
    "EMPTY_CACHE",
    "ENV_VARS",
    "FREE",
    "SETUP",
    "AddressSpace",
    "AllocatorConfig",
    "AllocatorOOM",
    "AllocatorReplay",
    "BlockInfo",
    "CachingAllocator",
    "ChunkedAddressSpace",
    "FirstFitAddressSpace",
    "OOMInfo",
    "Recording",
    "ReplayOps",
    "ReplayResult",
    "ScriptedAddressSpace",
    "SegmentEvent",
    "SegmentInfo",
    "TopDownAddressSpace",
    "allocation_size",
    "replay",
    "round_size",
    "segment_bases_from_trace",
]
