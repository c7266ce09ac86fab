"""The fixed sizes of PyTorch's CUDA caching allocator (c10/core/AllocatorConfig.h).

They are compile-time constants in torch 2.11-2.14; only ``kLargeBuffer``'s role as the
large-pool segment size became configurable (``large_segment_size_mb``), see ``_config``.
"""

from __future__ import annotations

__all__ = [
    "K_LARGE_BUFFER",
    "K_MIN_BLOCK_SIZE",
    "K_MIN_LARGE_ALLOC",
    "K_ROUND_LARGE",
    "K_SMALL_BUFFER",
    "K_SMALL_SIZE",
    "MB",
    "ROUNDUP_INTERVALS",
    "SIZE_MAX",
]

MB = 1024 * 1024
K_MIN_BLOCK_SIZE = 512  # every request is rounded up to a multiple of this
K_SMALL_SIZE = 1 * MB  # requests up to this size go to the small pool
K_SMALL_BUFFER = 2 * MB  # small-pool segment (and expandable page) size
K_MIN_LARGE_ALLOC = 10 * MB  # large requests below this get a whole large_segment_size segment
K_ROUND_LARGE = 2 * MB  # larger requests get a segment rounded up to this
K_LARGE_BUFFER = 20 * MB  # default large_segment_size
ROUNDUP_INTERVALS = 16  # roundup_power2_divisions has one entry per power of 2 from 1 MB to 32 GB
SIZE_MAX = (1 << 64) - 1  # std::numeric_limits<size_t>::max(), "no max_split_size"
