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

import dataclasses
import itertools
import re

from memfit.allocator import AllocatorConfig, AllocatorReplay, ReplayOps
from memfit.trace import Trace

__all__ = [
    "frees_by_step",
    "least_capacity",
    "released_by_step",
    "replay_ops",
    "retries_by_step",
    "retries_within",
    "runs_within",
]

_RELEASES = ("segment_free", "segment_unmap")

_STEP = re.compile(r"step\d+")
TOLERANCE = 64 << 20  # bytes: the bisection stops this close to the answer (from above)


def replay_ops(trace: Trace, *, setup_cache_kept: bool = False) -> ReplayOps:
    """The ops that replay ``trace``: its events, with the cache emptied where the steps start,
    as ``memfit validate`` (and a fresh job) does, and wherever the traced code emptied it.
    ``setup_cache_kept``: not where the steps start (a loop that keeps what the setup left
    cached, ``estimator._setup_cache``)."""
    empties = trace.empty_cache_at if setup_cache_kept else _empties(trace)
    return ReplayOps.from_events(trace.events, empty_cache_before=empties)


def _empties(trace: Trace) -> tuple[int, ...]:
    return (*trace.empty_cache_at, trace.steps_start)


def retries_within(trace: Trace, config: AllocatorConfig, capacity: int) -> int | None:
    """How many times the allocator frees its cache and retries (``num_alloc_retries``) while
    the traced run completes with at most ``capacity`` bytes reserved; None if it cannot."""
    return _retries(replay_ops(trace), config, capacity)


def _retries(ops: ReplayOps, config: AllocatorConfig, capacity: int) -> int | None:
    replay = AllocatorReplay(config, capacity)
    return replay.num_alloc_retries if replay.run(ops) else None


def retries_by_step(
    trace: Trace, config: AllocatorConfig, capacity: int, *, as_fraction: bool = False
) -> list[int] | None:
    """How many times the allocator frees its cache and retries in each of the traced steps
    (the setup counted with the first) while the run completes with at most ``capacity`` bytes
    reserved; None if it cannot. A step that frees its cache only in its first steps settles:
    the layout it is left with serves the later ones.

    ``as_fraction``: the limit is set as ``torch.cuda.set_per_process_memory_fraction`` sets
    it, which refuses a new segment when the reserved bytes and the whole request exceed it,
    even where expandable segments would map only part of the request; a GPU that is full
    refuses only the pages it cannot map. Qwen2.5-0.5B 8 x 1 fully checkpointed with expandable
    segments under a 16 GiB budget frees its cache once in four steps on a GPU that size, and in
    every step under the fraction (as it did on an H200: four in five steps,
    benchmarks/results/2026-12-03-h200-cache-free-plans)."""
    steps = frees_by_step(trace, config, capacity, as_fraction=as_fraction)
    return None if steps is None else [retries for retries, _ in steps]


def released_by_step(
    trace: Trace, config: AllocatorConfig, capacity: int, *, as_fraction: bool = False
) -> list[int] | None:
    """The bytes of cache the allocator gives back to the driver in each traced step, as
    :func:`retries_by_step` replays it (the setup's own ``empty_cache`` counted with the first
    step); None if the run cannot complete. What a step frees to retry it maps again later."""
    steps = frees_by_step(trace, config, capacity, as_fraction=as_fraction)
    return None if steps is None else [released for _, released in steps]


def frees_by_step(
    trace: Trace, config: AllocatorConfig, capacity: int, *, as_fraction: bool = False
) -> list[tuple[int, int]] | None:
    """Each traced step's cache frees and the bytes they gave back, from one replay: what
    :func:`retries_by_step` and :func:`released_by_step` each take a part of."""
    if as_fraction:
        total = max(capacity, 1) * 64  # any device larger than the limit: the fraction is exact
        fraction = dataclasses.replace(config, per_process_memory_fraction=capacity / total)
        replay = AllocatorReplay(fraction, None, device_total=total)
    else:
        replay = AllocatorReplay(config, capacity)
    empties = _empties(trace)
    bounds = [*_step_starts(trace), len(trace.events)]
    steps = []
    for start, end in itertools.pairwise(bounds):  # one replay, a step at a time
        ops = ReplayOps.from_events(
            trace.events[start:end],
            empty_cache_before=[i - start for i in empties if start <= i < end],
        )
        retries, seen = replay.num_alloc_retries, len(replay.segment_events)
        if not replay.run(ops):
            return None
        released = sum(e.size for e in replay.segment_events[seen:] if e.action in _RELEASES)
        steps.append((replay.num_alloc_retries - retries, released))
    return steps


def _step_starts(trace: Trace) -> list[int]:
    """The index of each step's first event (the first step's: 0, its setup with it)."""
    starts: dict[str, int] = {}
    for name, index in trace.phases:
        step = name.partition(".")[0]
        if _STEP.fullmatch(step) and step not in starts:
            starts[step] = index
    return [0, *sorted(starts.values())[1:]]


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
