"""The planner's search of partial activation checkpointing after the micro-batch bisections,
only where it could fit and tie the fastest found (the optimizer's variants search it beside
them too: ``_variant_search``)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from memfit.planner._candidates import (
    SPEED_TIE,
    Progress,
    fastest,
    fits,
    with_allocators,
)
from memfit.planner._parallel import run_jobs
from memfit.planner._plan_result import Candidate, Evaluated
from memfit.planner._search import Evaluator

__all__ = [
    "RECOMPUTE_BOUND",
    "partial_blocks",
    "partial_checkpointing",
    "search_partial",
]

RECOMPUTE_BOUND = 2.0  # full checkpointing's step over none's, at most (_worth_partial)


def partial_blocks(space: dict[str, tuple[Any, ...]]) -> int:
    """The model's blocks to share out where partial checkpointing can be searched (the space
    has no and full checkpointing, the model more than one block), else 0."""
    blocks: int = space["blocks"][0]
    ends = True in space["checkpointing"] and False in space["checkpointing"]
    return blocks if blocks > 1 and ends else 0


def search_partial(
    ev: Evaluator,
    space: dict[str, tuple[Any, ...]],
    levels: list[int],
    total: int,
    workers: int,
    progress: Progress | None,
) -> None:
    """Partial checkpointing (:func:`partial_checkpointing`) for each precision worth it, where
    the space has both ends and the model has blocks to share out."""
    blocks = partial_blocks(space)
    if not blocks:
        return
    first = space["optimizers"][0]

    def partial(done: int, of: int) -> None:
        if progress is not None:
            progress(done, of, "partial checkpointing searched")

    run_jobs(
        ev,
        lambda e, p: partial_checkpointing(e, levels, total, p, first, blocks),
        _worth_partial(ev, space["precisions"], first),
        workers,
        partial,
    )


def partial_checkpointing(
    ev: Evaluator, levels: list[int], total: int, precision: str, opt: str, blocks: int
) -> None:
    """Partial checkpointing at the micro-batches where no checkpointing does not fit and full
    does: the fewest blocks checkpointed that fit, at the two smallest such micro-batches (a
    larger one needs more blocks recomputed). The count is first guessed from the two ends,
    as memory falls about linearly with each block checkpointed, then raised until it fits;
    not at all where the step the same line predicts for that count cannot tie the fastest."""
    none_fit = [e.candidate.micro_batch for e in _searched(ev, precision, False, opt)]
    full_fit = [e.candidate.micro_batch for e in _searched(ev, precision, True, opt)]
    if not full_fit:
        return
    low, high = max(none_fit, default=0), max(full_fit)
    best = fastest(ev)
    for m in sorted(n for n in levels if low < n <= high)[:2]:
        at = Candidate(m, total // m, precision, False, opt, techniques=ev.kept)
        plains = ev.evaluate(with_allocators(at))
        fulls = ev.evaluate(with_allocators(dataclasses.replace(at, checkpointing=True)))
        plain, full = min(e.needed for e in plains), min(e.needed for e in fulls)
        if full >= plain or full > ev.usable:
            continue
        k = max(1, min(blocks - 1, math.ceil(blocks * (plain - ev.usable) / (plain - full))))
        # its step, by the same line between the two ends: too slow to tie, not traced
        t_plain, t_full = plains[0].step_seconds, fulls[0].step_seconds
        if t_plain + (t_full - t_plain) * k / blocks > best * (1 + SPEED_TIE):
            continue
        while k < blocks:
            if fits(ev, dataclasses.replace(at, checkpointing=round(k / blocks, 4))):
                break
            k += 1


def _worth_partial(ev: Evaluator, precisions: tuple[str, ...], opt: str) -> list[str]:
    """The precisions whose partial checkpointing could come within the tie of the fastest
    found so far: partial checkpointing at a micro-batch recomputes part of what full does
    there, so it is at best :data:`RECOMPUTE_BOUND` times faster than the precision's fastest
    full checkpointing (measured on the H200 up to 1.67 times: Qwen2.5-0.5B, whose host pays
    for the recompute too). fp32 against bf16-mixed on a GPU-bound model is skipped."""
    best = fastest(ev)
    out = []
    for p in precisions:
        full = [e.step_seconds for e in _searched(ev, p, True, opt)]
        if full and min(full) / RECOMPUTE_BOUND <= best * (1 + SPEED_TIE):
            out.append(p)
    return out


def _searched(ev: Evaluator, precision: str, ckpt: bool, opt: str) -> list[Evaluated]:
    """What the bisection of (``precision``, ``ckpt``) found to fit, by micro-batch."""
    return [
        e
        for e in ev.seen.values()
        if e.fits
        and e.candidate.precision == precision
        and e.candidate.checkpointing is ckpt
        and e.candidate.optimizer == opt
    ]
