"""The planner's search of ``memfit.technique``'s techniques, one axis each, by their hooks
alone: no technique is named here.

A technique trades speed for memory, so it is worth a trace only where it could make a step
fit that did not: for each value on its axis (``Technique.axis``), each precision and
checkpointing the bisection searched, the largest micro-batch found too large whose need, less
the most the technique saves (``Technique.saving``), is within the usable memory, and whose
step with the technique's time (``Technique.step_seconds``) could tie the fastest found.
Where nothing fits at all, the smallest micro-batch of each is tried with it. A configuration
the technique refuses (``Technique.refusal``) is skipped.

Techniques that change what is trained (``Technique.kept_in_plans``: LoRA, 4-bit weights) are
added only where the user allows them, each at its axis's first value, alone or together, a
technique only beside those it ``needs``; a model a technique cannot be added to (no default
targets, say) is said in the plan's notes, and the search goes on without it.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

from memfit._errors import InvalidInputError, MemfitError
from memfit.planner._candidates import SPEED_TIE, Progress, evaluate_group, fastest, with_allocators
from memfit.planner._parallel import run_jobs
from memfit.planner._plan_result import Candidate, Evaluated
from memfit.planner._search import Evaluator, techniques_seconds
from memfit.technique import TECHNIQUES, Technique, checked_techniques, techniques_in

__all__ = ["added_note", "allowed_techniques", "kept_techniques", "search_techniques"]

Change = tuple[tuple[Technique, Any], ...]  # techniques at their values, added together


def search_techniques(
    ev: Evaluator, workers: int, progress: Progress | None, allowed: tuple[str, ...] = ()
) -> list[str]:
    """Trace the candidates of every technique's axis that could fit and tie the fastest, and
    of the ``allowed`` techniques that change what is trained (see the module's docstring);
    returns the notes on allowed techniques that could not be added."""
    todo: list[list[Candidate]] = []
    for technique in TECHNIQUES:
        if technique.kept_in_plans:
            continue  # added only where allowed, below
        for value in technique.axis(ev.base):
            todo += [with_allocators(c) for c in _worth_trying(ev, ((technique, value),))]
    notes: list[str] = []
    for change in _allowed_changes(ev, allowed):
        why = _cannot_add(ev, change)
        if why is not None:
            notes.append(why)
            continue
        todo += [with_allocators(c) for c in _worth_trying(ev, change)]

    def searched(done: int, of: int) -> None:
        if progress is not None:
            progress(done, of, "techniques searched")

    run_jobs(ev, evaluate_group, todo, workers, searched)
    return notes


def allowed_techniques(allow: object) -> tuple[str, ...]:
    """``allow`` as given to :func:`memfit.plan`: the techniques that change what is trained
    that a plan may add, checked."""
    if allow is None:
        return ()
    choices = [t.option.keyword for t in TECHNIQUES if t.kept_in_plans]
    names = [allow] if isinstance(allow, str) else allow
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise InvalidInputError(
            f"allow={allow!r} is not a list of technique names: give those a plan may add "
            f"although they change what is trained, e.g. allow={choices[-1:]!r} (of "
            f"{', '.join(choices)})."
        )
    for name in names:
        if name not in choices:
            searched = [t.option.keyword for t in TECHNIQUES if not t.kept_in_plans]
            why = (
                "the plan tries it anyway"
                if name in searched
                else "it names no technique memfit knows"
            )
            raise InvalidInputError(
                f"allow={list(names)!r}: {name!r} cannot be allowed, {why}. allow takes the "
                f"techniques that change what is trained, which a plan adds only when allowed: "
                f"{', '.join(choices)}."
            )
    return tuple(dict.fromkeys(names))


def added_note(ev: Evaluator, chosen: Evaluated | None) -> list[str]:
    """The note on what the chosen configuration trains otherwise than the user's, where it
    adds allowed techniques (memfit.apply does not add them: the user's model must)."""
    if chosen is None:
        return []
    mine = dict(ev.kept)
    added = [(t, v) for t, v in techniques_in(chosen.candidate.techniques) if t.kept_in_plans]
    added = [(t, v) for t, v in added if mine.get(t.option.keyword) != v]
    if not added:
        return []
    words = " and ".join(t.words(v) for t, v in added)
    return [
        f"the chosen configuration adds {words}, which you allowed: it changes what is trained "
        "(the results are not your full fine-tune's). memfit.apply does not add it; make your "
        "model so first (PEFT's get_peft_model, bitsandbytes' 4-bit loading), then apply"
    ]


def kept_techniques(techniques: tuple[tuple[str, Any], ...]) -> tuple[tuple[str, Any], ...]:
    """Of the user's techniques, those every candidate keeps (``Technique.kept_in_plans``:
    they change what is trained, so a plan never drops them)."""
    return tuple((t.option.keyword, v) for t, v in techniques_in(techniques) if t.kept_in_plans)


def _allowed_changes(ev: Evaluator, allowed: tuple[str, ...]) -> list[Change]:
    """The allowed techniques that change what is trained, at their axes' first values: each
    alone and together, each only beside the techniques it needs, none the user has."""
    mine = {name for name, _ in ev.kept}
    offered = [
        (t, axis[0])
        for t in TECHNIQUES
        if t.option.keyword in allowed
        and t.option.keyword not in mine
        and (axis := t.axis(ev.base))
    ]
    changes: list[Change] = []
    for n in range(1, len(offered) + 1):
        for change in itertools.combinations(offered, n):
            names = mine | {t.option.keyword for t, _ in change}
            if all(set(t.needs) <= names for t, _ in change):
                changes.append(change)
    return changes


def _cannot_add(ev: Evaluator, change: Change) -> str | None:
    """Why ``change`` cannot be added to the user's configuration (the model made with it, as
    a step time's count of trained elements makes it: PEFT has no default targets for the
    architecture, say), or None where it can."""
    mine = _with(ev.baseline, change)
    try:
        if mine is not None:
            techniques_seconds(ev.workload(mine), ev.calibration)
    except MemfitError as err:
        words = " and ".join(t.words(v) for t, v in change)
        return f"{words} was allowed but cannot be added: {err}"
    return None


def _worth_trying(ev: Evaluator, change: Change) -> list[Candidate]:
    """The candidates with ``change`` (techniques at values) that could fit and tie the
    fastest."""
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
        chosen = _largest_within(ev, change, over, best)
        if chosen is None and math.isinf(best) and group:  # nothing fits anywhere yet
            chosen = min(group, key=lambda e: e.candidate.micro_batch)
        if chosen is None:
            continue
        with_it = _with(chosen.candidate, change)
        if with_it is not None and _could_tie(ev, with_it, chosen.step_seconds, best):
            out[with_it] = None
    return list(out)


def _largest_within(
    ev: Evaluator, change: Change, over: list[Evaluated], best: float
) -> Evaluated | None:
    """Of ``over`` (one configuration's micro-batches too large), the largest that the
    change's saving could bring within the usable memory with a step that could tie
    ``best``."""
    trained = ev.parameters[1]
    for e in sorted(over, key=lambda e: -e.candidate.micro_batch):
        workload = ev.workload(e.candidate)
        saved = sum(t.saving(v, trained, workload) for t, v in change)
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


def _with(c: Candidate, change: Change) -> Candidate | None:
    """``c`` with the techniques of ``change`` at their values beside its others (None: they
    are at their defaults, nothing to try)."""
    given = dict(c.techniques) | {t.option.keyword: v for t, v in change}
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
