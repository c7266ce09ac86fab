"""Candidates that fit a budget only because the caching allocator frees its cache.

A candidate's ``needed`` is its peak reserved running free: the allocator keeps every freed
block cached. On a full GPU it frees the unused cache and retries instead of failing, so a
step can run in less. Where it does so only in its first steps and never again (the layout the
retry leaves serves every later step), the step is as fast as running free after those steps:
Qwen2.5-0.5B 8 x 1 fully checkpointed needs 16.75 GB running free, ran under a 16 GiB cap in
150 ms a step where the plan that fitted running free took 283 (on an H200,
benchmarks/results/2026-12-03-h200-plans-through-apply), and its replay at
that cap frees the cache once in four steps. Such a candidate is chosen when it is faster than
the fastest that fits running free, with :data:`SETTLE_MARGIN` more room kept than the plan's
margin (the emulator's tight runs are less proven than its free-running peaks). One that frees
its cache every step is only named (each free waits for the GPU and maps memory again). Each
candidate must also run under a process's memory fraction of the budget, which refuses a new
segment for the whole request even where expandable segments would map only part of it; a step
that settles on a GPU of the budget's size may free its cache in every step there (the note
says so).
"""

from __future__ import annotations

import dataclasses

from memfit._units import format_bytes
from memfit.estimator import estimate_workload, frees_by_step, least_capacity, retries_by_step
from memfit.planner._full import FULL_CHECK_LIMIT
from memfit.planner._plan_result import Evaluated
from memfit.planner._search import TRACED_MICRO_BATCHES, Evaluator, shortened
from memfit.trace import trace_workload
from memfit.workload import Workload

__all__ = ["SETTLE_MARGIN", "SETTLE_STEPS", "settled_choice"]

SETTLE_MARGIN = 0.02  # the share of the usable memory a settling step leaves free besides
SETTLE_STEPS = 4  # steps replayed: the last two must not free the cache
_TRIES = 3  # candidates checked (a trace each), fastest first


def settled_choice(
    ev: Evaluator, chosen: Evaluated | None, tie: float
) -> tuple[Evaluated | None, str | None]:
    """The fastest candidate faster than ``chosen`` by more than ``tie`` (any, where nothing
    fits running free) that runs within the usable memory by the allocator freeing its cache in
    its first steps only, marked as fitting (``runs_in``, ``cache_frees``), with a note saying
    so; else None and, where a faster one runs only by freeing its cache every step, a note
    naming it."""
    room = int(ev.usable * (1 - SETTLE_MARGIN))
    limit = chosen.step_seconds * (1 - tie) if chosen is not None else float("inf")
    faster = sorted(
        (
            e
            for e in ev.seen.values()
            if not e.fits
            and e.step_seconds < limit
            and e.peak_allocated + (e.needed - e.peak_reserved) <= room
        ),
        key=lambda e: (e.step_seconds, e.needed),  # expandable segments first, on a tie
    )
    every_step: Evaluated | None = None
    for e in faster[:_TRIES]:
        context = e.needed - e.peak_reserved
        workload = _checked_workload(ev, e)
        trace = trace_workload(workload, ev.gpu)
        ev.traces += 1
        per_step = retries_by_step(trace, workload.allocator, room - context)
        # and under a process's memory fraction, which refuses more: it must run there too
        capped = frees_by_step(trace, workload.allocator, room - context, as_fraction=True)
        if per_step is None or capped is None:
            continue
        if any(per_step[-2:]):
            every_step = every_step or e
            continue
        estimate = estimate_workload(workload, trace=trace, setup_note=False)
        least = least_capacity(
            trace, workload.allocator, estimate.peak_allocated, estimate.peak_reserved
        )
        settled = dataclasses.replace(
            e,
            fits=True,
            runs_in=least + context,
            cache_frees=sum(per_step),
            peak_allocated=max(e.peak_allocated, estimate.peak_allocated),
            peak_reserved=max(e.peak_reserved, estimate.peak_reserved),
            needed=max(e.needed, estimate.peak_reserved + context),
        )
        ev.seen[e.candidate] = settled
        return settled, _settled_note(ev, settled, chosen, per_step, capped)
    if every_step is None:
        return None, None
    return None, _every_step_note(ev, every_step, chosen)


def _checked_workload(ev: Evaluator, e: Evaluated) -> Workload:
    """The candidate's workload for :data:`SETTLE_STEPS` steps: its whole accumulation, or the
    traced two micro-batches where it is longer than the chosen plan's full check."""
    workload = ev.workload(e.candidate)
    if e.candidate.accumulation > FULL_CHECK_LIMIT:
        workload = shortened(workload, TRACED_MICRO_BATCHES)
    return dataclasses.replace(workload, steps=SETTLE_STEPS)


def _settled_note(
    ev: Evaluator,
    e: Evaluated,
    chosen: Evaluated | None,
    per_step: list[int],
    capped: list[tuple[int, int]],
) -> str:
    frees = sum(per_step)
    first = next(i for i, n in enumerate(per_step, 1) if n)
    when = f"in step {first}" if frees == per_step[first - 1] else f"in its first {first} steps"
    faster = (
        f"{chosen.step_seconds / e.step_seconds:.1f}x as fast as the fastest that fits with its "
        f"cache kept ({chosen.candidate.describe()})"
        if chosen is not None
        else "nothing fits with its cache kept"
    )
    return (
        f"the chosen {e.candidate.describe()} needs {format_bytes(e.needed)} with its cache kept, "
        f"more than the {format_bytes(ev.usable)} usable, but runs in "
        f"{format_bytes(e.footprint)}: when the GPU is full the allocator frees its unused cache "
        f"and retries, {_times(frees)} {when} and never after (replayed for {len(per_step)} "
        f"steps with {SETTLE_MARGIN:.0%} more kept free); chosen because {faster}. memfit.apply "
        "guards it against the out-of-memory error a busier GPU would raise; plan with "
        "cache_freeing=False (--no-cache-freeing) to keep to steps that fit with their cache"
        + _fraction_words(capped)
    )


def _fraction_words(capped: list[tuple[int, int]]) -> str:
    """What a process held to the budget by ``torch.cuda.set_per_process_memory_fraction``
    sees instead (``capped``: each step's cache frees and the bytes they gave back there): that
    limit refuses a whole request where a full GPU maps what is left."""
    if not any(retries for retries, _ in capped[-2:]):
        return ""
    retries, released = capped[-1]
    return (
        f". Held to the budget by torch.cuda.set_per_process_memory_fraction instead of by a GPU "
        f"that size, it frees its cache in every step ({retries} in the last, giving back "
        f"{format_bytes(released)} that it maps again): it still runs, but slower than its "
        "predicted time says (on an H200 one such free of 2.4 GiB, waiting for the GPU, "
        "unmapping and mapping again, took 18-19 ms)"
    )


def _every_step_note(ev: Evaluator, e: Evaluated, chosen: Evaluated | None) -> str:
    than = (
        f" is predicted {chosen.step_seconds / e.step_seconds:.1f}x as fast as the chosen and"
        if chosen is not None
        else ""
    )
    return (
        f"{e.candidate.describe()}{than} needs {format_bytes(e.needed)} with its cache kept, "
        f"more than the {format_bytes(ev.usable)} usable; it runs within them only by the "
        "allocator freeing its cache and retrying in every step (each time waiting for the GPU "
        "and mapping memory again): not chosen; a larger budget would choose it"
    )


def _times(n: int) -> str:
    return "once" if n == 1 else "twice" if n == 2 else f"{n} times"
