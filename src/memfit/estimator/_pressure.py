"""The least memory a step runs in, when the caching allocator is short of it.

``peak_reserved`` is what the allocator holds when memory is plentiful: it keeps freed blocks
cached. When a ``cudaMalloc`` fails, torch frees every unused cached segment and tries again,
and only then raises out-of-memory; so a step runs in less than its free-running peak reserved
(ResNet-50's fp32 training on an H200 ran at a batch 20% above the one whose peak reserved fills
the GPU). :func:`least_capacity` finds that least amount by replaying the trace through the
allocator emulator at a capacity, bisecting between the peak allocated (nothing runs in less)
and the peak reserved (which always runs).
"""

from __future__ import annotations

from collections.abc import Iterator

from memfit.allocator import AllocatorConfig, AllocatorOOM, CachingAllocator
from memfit.trace import Trace

__all__ = ["feed", "least_capacity", "retries_within", "runs_within"]

TOLERANCE = 64 << 20  # bytes: the bisection stops this close to the answer (from above)


def feed(trace: Trace, alloc: CachingAllocator) -> Iterator[int]:
    """Replay ``trace`` into ``alloc``, yielding each event's index once it is applied; the
    cache is emptied where the steps start, as ``memfit validate`` (and a fresh job) does."""
    for i, event in enumerate(trace.events):
        if i == trace.steps_start:
            alloc.empty_cache()
        if event.kind == "alloc":
            alloc.malloc(event.block, event.size, event.stream)
        else:
            alloc.free(event.block)
        yield i


def retries_within(trace: Trace, config: AllocatorConfig, capacity: int) -> int | None:
    """How many times the allocator frees its cache and retries (``num_alloc_retries``) while
    the traced run completes with at most ``capacity`` bytes reserved; None if it cannot."""
    alloc = CachingAllocator(config, capacity)
    try:
        for _ in feed(trace, alloc):
            pass
    except AllocatorOOM:
        return None
    return alloc.num_alloc_retries


def runs_within(trace: Trace, config: AllocatorConfig, capacity: int) -> bool:
    """Whether the traced run completes with at most ``capacity`` bytes reserved."""
    return retries_within(trace, config, capacity) is not None


def least_capacity(
    trace: Trace, config: AllocatorConfig, peak_allocated: int, peak_reserved: int
) -> int:
    """The least capacity (within :data:`TOLERANCE`, never below the answer) in which the
    traced run completes; at most ``peak_reserved``."""
    low, high = peak_allocated - 1, peak_reserved  # low fails, high runs
    while high - low > TOLERANCE:
        mid = (low + high) // 2
        if runs_within(trace, config, mid):
            high = mid
        else:
            low = mid
    return high
