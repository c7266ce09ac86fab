"""The planner's search of the optimizer's variants (``memfit.technique.OptimizerVariant``: an
optimizer named with a suffix, ``adamw-8bit``) after the micro-batch bisections, by their hooks
alone: no variant is named here.

A variant trades speed or what the optimizer computes for memory, so it is tried only where the
most it saves (``Technique.saving``, at the step's precision; nothing: not tried there) could
make a step fit that the optimizer the bisections used did not, and then:

- one that cannot accumulate gradients over micro-batches (``accumulates`` False) at the whole
  global batch, wherever the bisection found that too large;
- one that can at the largest micro-batch the bisection found too large whose excess its saving
  covers, where that step could tie the fastest found (a variant never makes a step faster).

Each is followed by partial checkpointing with it, where it fits with full checkpointing
(:func:`~memfit.planner._partial_search.partial_checkpointing`): with less memory held, fewer
blocks may be recomputed.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

from memfit.planner._candidates import (
    SPEED_TIE,
    Progress,
    evaluate_group,
    fastest,
    with_allocators,
)
from memfit.planner._parallel import run_jobs
from memfit.planner._partial_search import partial_blocks, partial_checkpointing
from memfit.planner._plan_result import Candidate, Evaluated
from memfit.planner._search import Evaluator
from memfit.technique import TECHNIQUES, OptimizerVariant, optimizer_variant_of

__all__ = ["accumulates", "search_variants", "variants_of"]

Saved = Callable[[Candidate], int]  # at most what a variant saves of a candidate's step


def accumulates(name: object) -> bool:
    """Whether the optimizer ``name`` adds gradients up over micro-batches (a plain optimizer
    or a factory does, and a variant that says so)."""
    variant = optimizer_variant_of(name)
    return variant is None or variant.accumulates


def variants_of(space: dict[str, tuple[Any, ...]]) -> list[tuple[OptimizerVariant, str]]:
    """Each variant ``space["variants"]`` names, with the first of its names there, in the
    registry's order (the order they are searched in)."""
    out = []
    for technique in TECHNIQUES:
        if not isinstance(technique, OptimizerVariant):
            continue
        mine = [n for n in space["variants"] if optimizer_variant_of(n) is technique]
        if mine:
            out.append((technique, mine[0]))
    return out


def search_variants(
    ev: Evaluator,
    space: dict[str, tuple[Any, ...]],
    total: int,
    workers: int,
    progress: Progress | None,
) -> None:
    """Each variant of the space, in the registry's order, as the module says."""
    trained: int = space["trained"][0]
    for variant, name in variants_of(space):
        tried = _Tried(
            ev,
            space,
            total,
            workers,
            name,
            functools.partial(_saving, ev, variant, name, trained),
            functools.partial(_searched, progress, variant.searched_words),
        )
        (_search_accumulating if variant.accumulates else _search_whole_batch)(tried)


@dataclasses.dataclass(frozen=True)
class _Tried:
    """One variant's search: the evaluator and space, the global batch, the workers, the
    variant's name, what it saves of a candidate's step and its progress."""

    ev: Evaluator
    space: dict[str, tuple[Any, ...]]
    total: int
    workers: int
    name: str
    saved: Saved
    searched: Callable[[int, int], None]


def _saving(ev: Evaluator, variant: OptimizerVariant, name: str, trained: int, c: Candidate) -> int:
    """At most what the variant ``name`` saves of ``c``'s step (``trained``: the parameter
    elements the searches size gradients and states by)."""
    return variant.saving(name, trained, ev.workload(c))


def _searched(progress: Progress | None, words: str, done: int, of: int) -> None:
    if progress is not None:
        progress(done, of, f"{words} searched")


def _search_whole_batch(tried: _Tried) -> None:
    """The variant ``name``, which cannot accumulate, at the whole global batch, for each
    precision and checkpointing whose bisection found that micro-batch too large with the
    optimizer the bisections used, and only where it could then fit. Where full checkpointing
    fits the whole global batch, partial checkpointing is searched with the variant too: with
    what it saves, fewer blocks may be recomputed."""
    ev, space, total, workers = tried.ev, tried.space, tried.total, tried.workers
    name, saved = tried.name, tried.saved
    first = space["optimizers"][0]
    todo = []
    for e in list(ev.seen.values()):
        c = e.candidate
        if c.micro_batch != total or c.optimizer != first or c.allocator_config:
            continue
        saving = saved(c)
        if saving <= 0:
            continue
        needed = min(x.needed for x in ev.evaluate(with_allocators(c)))
        if needed > ev.usable and needed - saving <= ev.usable:
            todo.append(with_allocators(dataclasses.replace(c, optimizer=name)))
    run_jobs(ev, evaluate_group, todo, workers, tried.searched)
    blocks = partial_blocks(space)
    if not blocks:
        return
    fitting = {  # full checkpointing fits the whole batch: with the variant, fewer blocks
        e.candidate.precision
        for e in ev.seen.values()
        if e.fits
        and e.candidate.micro_batch == total
        and e.candidate.checkpointing is True
        and saved(e.candidate) > 0
    }

    def partial(e: Evaluator, precision: str) -> None:
        if _partial_could_tie(e, total, precision, first, blocks, saved):
            e.evaluate(
                with_allocators(Candidate(total, 1, precision, True, name, techniques=e.kept))
            )
            partial_checkpointing(e, [total], total, precision, name, blocks)

    run_jobs(ev, partial, sorted(fitting), workers)


def _partial_could_tie(
    ev: Evaluator, total: int, precision: str, opt: str, blocks: int, saved: Saved
) -> bool:
    """Whether partial checkpointing with a variant that cannot accumulate could tie the
    fastest found: by the line between no and full checkpointing with ``opt`` (both evaluated
    at the whole batch by the bisection), with the variant's saving taken off both ends, the
    fewest blocks that fit, and the step the line gives them (the variant's own cost left out:
    the guess is generous)."""
    ends = []
    for ckpt in (False, True):
        found = ev.seen.get(Candidate(total, 1, precision, ckpt, opt, techniques=ev.kept))
        if found is None:
            return False
        ends.append(found)
    plain, full = ends
    over = plain.needed - saved(plain.candidate) - ev.usable
    if over <= 0 or plain.needed <= full.needed:  # fits with no checkpointing, or no line
        return False
    k = min(blocks, math.ceil(blocks * over / (plain.needed - full.needed)))
    t = plain.step_seconds + (full.step_seconds - plain.step_seconds) * k / blocks
    return t <= fastest(ev) * (1 + SPEED_TIE)


def _search_accumulating(tried: _Tried) -> None:
    """For each precision and checkpointing the bisection searched, the variant ``name`` at
    the largest micro-batch it found too large that needs no more than the variant saves over
    the usable memory, where its step could tie the fastest found. Where it fits with full
    checkpointing, fewer blocks checkpointed with it at that micro-batch
    (:func:`partial_checkpointing`, which traces only what could tie)."""
    ev, space, total, workers = tried.ev, tried.space, tried.total, tried.workers
    name, saved = tried.name, tried.saved
    first = space["optimizers"][0]
    best = fastest(ev)
    todo = []
    for precision in space["precisions"]:
        for ckpt in space["checkpointing"]:
            over = _largest_within(ev, precision, ckpt, first, saved)
            if over is not None and over.step_seconds <= best * (1 + SPEED_TIE):
                todo.append(with_allocators(dataclasses.replace(over.candidate, optimizer=name)))
    run_jobs(ev, evaluate_group, todo, workers, tried.searched)
    blocks = partial_blocks(space)
    if not blocks:
        return
    largest: dict[str, int] = {}  # per precision, the largest micro-batch the variant fits
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


def _largest_within(
    ev: Evaluator, precision: str, ckpt: Any, opt: str, saved: Saved
) -> Evaluated | None:
    """Of the micro-batches the bisection of (``precision``, ``ckpt``) found too large, the
    largest that needs no more than the variant saves (``saved``) over the usable memory; None
    where there is none, a larger one fits already, or the variant saves nothing there."""
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
    over = [e for e in mine if not e.fits and e.candidate.micro_batch > fitting]
    within = [e for e in over if (s := saved(e.candidate)) > 0 and e.needed - s <= ev.usable]
    return max(within, key=lambda e: e.candidate.micro_batch, default=None)
