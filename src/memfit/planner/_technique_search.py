"""The planner's search of ``memfit.technique``'s techniques, one axis each, by their hooks
alone: no technique is named here.

A technique trades speed for memory, so it is worth a trace only where it could make a step
fit that did not: for each value on its axis (``Technique.axis``), each precision and
checkpointing the bisection searched, the largest micro-batch found too large whose need, less
the most the technique saves (``Technique.saving``), is within the usable memory, and whose
step with the technique's time (``Technique.step_seconds``) could tie the fastest found.
Where nothing fits at all, the smallest micro-batch of each is tried with it. A configuration
the technique refuses (``Technique.refusal``) is skipped.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from memfit._errors import InvalidInputError
from memfit.planner._candidates import SPEED_TIE, Progress, evaluate_group, fastest, with_allocators
from memfit.planner._parallel import run_jobs
from memfit.planner._plan_result import Candidate, Evaluated
from memfit.planner._search import Evaluator, techniques_seconds
from memfit.technique import TECHNIQUES, Technique, checked_techniques, techniques_in

__all__ = ["kept_techniques", "search_techniques"]


def search_techniques(ev: Evaluator, workers: int, progress: Progress | None) -> None:
    """Trace the candidates of every technique's axis that could fit and tie the fastest (see
    the module's docstring)."""
    todo: list[list[Candidate]] = []
    for technique in TECHNIQUES:
        for value in technique.axis(ev.base):
            todo += [with_allocators(c) for c in _worth_trying(ev, technique, value)]

    def searched(done: int, of: int) -> None:
        if progress is not None:
            progress(done, of, "techniques searched")

    run_jobs(ev, evaluate_group, todo, workers, searched)


def kept_techniques(techniques: tuple[tuple[str, Any], ...]) -> tuple[tuple[str, Any], ...]:
    """Of the user's techniques, those every candidate keeps (``Technique.kept_in_plans``:
    they change what is trained, so a plan never drops them)."""
    return tuple((t.option.keyword, v) for t, v in techniques_in(techniques) if t.kept_in_plans)


def _worth_trying(ev: Evaluator, technique: Technique, value: Any) -> list[Candidate]:
    """The candidates with ``technique`` at ``value`` that could fit and tie the fastest."""
    best = fastest(ev)
    plain = [
        e
        for e in ev.seen.values()
        if e.candidate.techniques == ev.kept and not e.candidate.allocator_config
    ]
    out: dict[Candidate, None] = {}
    for group in _by_configuration(plain).values():
        fitting = max((e.candidate.micro_batch for e in group if e.fits), default=0)
        over = [e for e in group if not e.fits and e.candidate.micro_batch > fitting]
        chosen = _largest_within(ev, technique, value, over, best)
        if chosen is None and math.isinf(best) and group:  # nothing fits anywhere yet
            chosen = min(group, key=lambda e: e.candidate.micro_batch)
        if chosen is None:
            continue
        with_it = _with(chosen.candidate, technique, value)
        if with_it is not None and _could_tie(ev, with_it, chosen.step_seconds, best):
            out[with_it] = None
    return list(out)


def _largest_within(
    ev: Evaluator, technique: Technique, value: Any, over: list[Evaluated], best: float
) -> Evaluated | None:
    """Of ``over`` (one configuration's micro-batches too large), the largest that the
    technique's saving could bring within the usable memory with a step that could tie
    ``best``."""
    trained = ev.parameters[1]
    for e in sorted(over, key=lambda e: -e.candidate.micro_batch):
        workload = ev.workload(e.candidate)
        saved = technique.saving(value, trained, workload)
        if e.needed - saved > ev.usable:
            continue
        if e.step_seconds > best * (1 + SPEED_TIE):
            continue
        return e
    return None


def _by_configuration(seen: list[Evaluated]) -> dict[tuple[Any, ...], list[Evaluated]]:
    """The evaluated candidates by what the bisection holds fixed while it varies the
    micro-batch."""
    out: dict[tuple[Any, ...], list[Evaluated]] = {}
    for e in seen:
        c = e.candidate
        key: tuple[Any, ...] = (c.precision, type(c.checkpointing), c.checkpointing)
        key += (c.optimizer, c.memory_budget, c.offload, c.offload_checkpoints)
        key += (c.micro_batch * c.accumulation,)
        out.setdefault(key, []).append(e)
    return out


def _with(c: Candidate, technique: Technique, value: Any) -> Candidate | None:
    """``c`` with ``technique`` at ``value`` beside its others (None: the value is the
    technique's default, nothing to try)."""
    given = dict(c.techniques) | {technique.option.keyword: value}
    techniques = checked_techniques(given)
    if techniques == c.techniques:
        return None
    return dataclasses.replace(c, techniques=techniques)


def _could_tie(ev: Evaluator, c: Candidate, seconds: float, best: float) -> bool:
    """Whether ``c`` is a workload memfit takes (a technique may refuse the others) whose step,
    ``seconds`` without its techniques, could tie ``best`` with their time added (a
    calibration without the rates a technique is timed by: not tried)."""
    try:
        extra = techniques_seconds(ev.workload(c), ev.calibration)
    except InvalidInputError:
        return False
    return seconds + extra <= best * (1 + SPEED_TIE)
