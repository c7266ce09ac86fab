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

from memfit.allocator import AllocatorConfig, AllocatorReplay, ReplayOps
from memfit.trace import Trace

__all__ = ["least_capacity", "replay_ops", "retries_within", "runs_within"]

TOLERANCE = 64 << 20  # bytes: the bisection stops this close to the answer (from above)


def replay_ops(trace: Trace) -> ReplayOps:
    """The ops that replay ``trace``: its events, with the cache emptied where the steps start,
    as ``memfit validate`` (and a fresh job) does, and wherever the traced code emptied it."""
    return ReplayOps.from_events(
        trace.events, empty_cache_before=(*trace.empty_cache_at, trace.steps_start)
    )


def retries_within(trace: Trace, config: AllocatorConfig, capacity: int) -> int | None:
    """How many times the allocator frees its cache and retries (``num_alloc_retries``) while
    the traced run completes with at most ``capacity`` bytes reserved; None if it cannot."""
    return _retries(replay_ops(trace), config, capacity)


def _retries(ops: ReplayOps, config: AllocatorConfig, capacity: int) -> int | None:
    replay = AllocatorReplay(config, capacity)
    return replay.num_alloc_retries if replay.run(ops) else None


def runs_within(trace: Trace, config: AllocatorConfig, capacity: int) -> bool:
    """Whether the traced run completes with at most ``capacity`` bytes reserved."""
    return retries_within(trace, config, capacity) is not None


def least_capacity(
    trace: Trace, config: AllocatorConfig, peak_allocated: int, peak_reserved: int
) -> int:
    """The least capacity (within :data:`TOLERANCE`, never below the answer) in which the
    traced run completes; at most ``peak_reserved``."""
    ops = replay_ops(trace)
    low, high = peak_allocated - 1, peak_reserved  # low fails, high runs
    while high - low > TOLERANCE:
        mid = (low + high) // 2
        if _retries(ops, config, mid) is not None:
            high = mid
        else:
            low = mid
    return high
