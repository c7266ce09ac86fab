"""How a request becomes a block size and a segment size.

Mirrors ``round_size`` / ``roundup_power2_next_division`` / ``get_allocation_size`` in
c10/cuda/CUDACachingAllocator.cpp and ``AcceleratorAllocatorConfig::roundup_power2_divisions``
in c10/core/AllocatorConfig.cpp. These decide every byte the allocator counts, so they follow
the C++ integer arithmetic exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

from memfit.allocator._constants import (
    K_MIN_BLOCK_SIZE,
    K_MIN_LARGE_ALLOC,
    K_ROUND_LARGE,
    K_SMALL_BUFFER,
    K_SMALL_SIZE,
    ROUNDUP_INTERVALS,
)

__all__ = ["allocation_size", "divisions_for", "round_size", "roundup_power2_next_division"]

_LOG2_1MB = 20  # the divisions table starts at 1 MB (index 0) and ends at 32 GB (index 15)


def divisions_for(size: int, table: Sequence[int]) -> int:
    """The power-of-2 divisions configured for ``size``'s interval (``roundup_power2_divisions``).

    Index ``floor(log2(size)) - 20``, clamped to ``[0, 15]``: sizes below 2 MB share entry 0,
    sizes of 32 GB and more share entry 15.
    """
    index = size.bit_length() - 1 - _LOG2_1MB
    index = min(max(index, 0), ROUNDUP_INTERVALS - 1)
    return table[index]


def roundup_power2_next_division(size: int, divisions: int) -> int:
    """Round ``size`` up to the next of ``divisions`` equal steps between two powers of 2.

    E.g. 1200 with 4 divisions: steps of 256 between 1024 and 2048, so 1280.
    """
    if size & (size - 1) == 0:
        return size
    power2_floor = 1 << (size.bit_length() - 1)
    step = power2_floor >> (divisions.bit_length() - 1)
    if step == 0:
        return power2_floor << 1
    floor = size & ~(step - 1)
    return size if floor == size else floor + step


def round_size(size: int, table: Sequence[int]) -> int:
    """The block size a request of ``size`` bytes gets (``round_size``)."""
    if size < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    divisions = divisions_for(size, table)
    if divisions > 1 and size > K_MIN_BLOCK_SIZE * divisions:
        return roundup_power2_next_division(size, divisions)
    return (size + K_MIN_BLOCK_SIZE - 1) // K_MIN_BLOCK_SIZE * K_MIN_BLOCK_SIZE


def allocation_size(size: int, large_segment_size: int) -> int:
    """The segment ``cudaMalloc`` gets when no cached block fits (``get_allocation_size``).

    Small-pool blocks (<= 1 MiB) get a 2 MiB segment, large blocks under 10 MiB a whole
    ``large_segment_size`` (20 MiB by default) to be split, larger ones a 2 MiB multiple.
    """
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return large_segment_size
    return (size + K_ROUND_LARGE - 1) // K_ROUND_LARGE * K_ROUND_LARGE
