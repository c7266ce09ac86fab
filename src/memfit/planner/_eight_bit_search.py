"""The planner's search of 8-bit optimizer states (bitsandbytes' Adam8bit / AdamW8bit, when
installed): for each precision and checkpointing, the largest micro-batch that did not fit only
by what 8-bit states save, where it could tie the fastest found; then, where 8-bit states fit
with full checkpointing, partial checkpointing with them."""

from __future__ import annotations

import dataclasses
from typing import Any

from memfit.planner._candidates import (
    SPEED_TIE,
    Progress,
    evaluate_group,
    fastest,
    param_bytes,
    with_allocators,
)
from memfit.planner._parallel import run_jobs
from memfit.planner._partial_search import partial_blocks, partial_checkpointing
from memfit.planner._search import Evaluator

__all__ = ["search_eight_bit", "states_saved"]


def states_saved(trained: int, precision: str) -> int:
    """What 8-bit states save against Adam's two full states: a byte per element each (and a
    float32 scale per 256) instead of four (fp32 and mixed precision) or two (pure bf16/fp16)."""
    return trained * 2 * (param_bytes(precision) - 1) - trained * 2 * 4 // 256


def search_eight_bit(
    ev: Evaluator,
    space: dict[str, tuple[Any, ...]],
    total: int,
    workers: int,
    progress: Progress | None,
) -> None:
    """For each precision and checkpointing the bisection searched, the 8-bit states at the
    largest micro-batch it found too large that needs no more than the states save over the
    usable memory, where its step could tie the fastest found (8-bit states never make a step
    faster). Where they fit with full checkpointing, fewer blocks checkpointed with them at
    that micro-batch (:func:`partial_checkpointing`, which traces only what could tie)."""
    if not space["eight_bit"]:
        return
    first, name = space["optimizers"][0], space["eight_bit"][0]
    best = fastest(ev)
    todo = []
    saved_by = {p: states_saved(space["trained"][0], p) for p in space["precisions"]}
    for precision in space["precisions"]:
        if precision == "fp16-mixed":
            continue  # bitsandbytes' 8-bit optimizers and GradScaler: not searched
        for ckpt in space["checkpointing"]:
            over = _largest_within(ev, precision, ckpt, first, saved_by[precision])
            if over is not None and over.step_seconds <= best * (1 + SPEED_TIE):
                todo.append(with_allocators(dataclasses.replace(over.candidate, optimizer=name)))

    def searched(done: int, of: int) -> None:
        if progress is not None:
            progress(done, of, "8-bit optimizer states searched")

    run_jobs(ev, evaluate_group, todo, workers, searched)
    blocks = partial_blocks(space)
    if not blocks:
        return
    largest: dict[str, int] = {}  # per precision, the largest micro-batch 8-bit states fit
    for e in ev.seen.values():  # with full checkpointing
        c = e.candidate
        if e.fits and c.optimizer == name and c.checkpointing is True:
            largest[c.precision] = max(largest.get(c.precision, 0), c.micro_batch)
    run_jobs(
        ev,
        lambda e, p: partial_checkpointing(e, [largest[p]], total, p, name, blocks),
        sorted(largest),
        workers,
    )


def _largest_within(ev: Evaluator, precision: str, ckpt: Any, opt: str, saved: int) -> Any:
    """Of the micro-batches the bisection of (``precision``, ``ckpt``) found too large, the
    largest that needs no more than ``saved`` over the usable memory; None where there is none
    or a larger one fits already."""
    mine = [
        e
        for e in ev.seen.values()
        if e.candidate.precision == precision
        and e.candidate.checkpointing == ckpt
        and type(e.candidate.checkpointing) is type(ckpt)
        and e.candidate.optimizer == opt
        and not e.candidate.allocator_config
    ]
    fitting = max((e.candidate.micro_batch for e in mine if e.fits), default=0)
    over = [
        e
        for e in mine
        if not e.fits and e.candidate.micro_batch > fitting and e.needed - saved <= ev.usable
    ]
    return max(over, key=lambda e: e.candidate.micro_batch, default=None)
