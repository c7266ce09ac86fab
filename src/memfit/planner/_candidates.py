"""What the planner's searches share: the candidates' allocator variants, whether one fits, the
fastest found so far, and the tie between predicted step times."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from memfit.planner._plan_result import Candidate, Evaluated, param_bytes
from memfit.planner._search import Evaluator

__all__ = [
    "CHOICE_TIE",
    "EXPANDABLE",
    "SPEED_TIE",
    "Progress",
    "evaluate_group",
    "fastest",
    "fits",
    "param_bytes",
    "replay_notes",
    "traced",
    "with_allocators",
]

# predicted step times closer than this may be the model's error: the searches trace what comes
# within it of the fastest, and a faster step is named beside the plan only beyond it
SPEED_TIE = 0.05
# the plan's choice (_plan's _choice) is the fastest, except that of those within this of it the
# one that changes least, then needs least, is taken: 5% had GPT-2 at 24 GiB choose a step 8%
# slower than the fastest, and ViT-B/16 at 6 GiB full checkpointing, 6% slower (measured in
# benchmarks/results/2026-12-03-h200-plans-one-machine; the model's errors between two close
# steps of one model are smaller than across models)
CHOICE_TIE = 0.02
EXPANDABLE = "expandable_segments:True"
Progress = Callable[[int, int, str], None]


def evaluate_group(ev: Evaluator, group: list[Candidate]) -> None:
    ev.evaluate(group)


def with_allocators(c: Candidate) -> list[Candidate]:
    other = "" if c.allocator_config == EXPANDABLE else EXPANDABLE
    if c.allocator_config not in ("", EXPANDABLE):
        return [c, dataclasses.replace(c, allocator_config=EXPANDABLE)]
    return [c, dataclasses.replace(c, allocator_config=other)]


def traced(ev: Evaluator, c: Candidate) -> Evaluated:
    """``c`` evaluated from a trace at its own micro-batch: traced again where it was replayed
    from a batch model's derived trace (``Evaluator.retrace``)."""
    group = with_allocators(c)
    found = ev.evaluate(group)
    if any(e.replayed_from for e in found):
        found = ev.retrace(group)
    return found[0]


def replay_notes(ev: Evaluator) -> list[str]:
    """What the plan's batch models derived, and why they did not where a configuration was
    traced at several micro-batches, in notes."""
    seen = list(ev.seen.values())
    replayed = [e for e in seen if e.replayed_from and e.traced]
    out = []
    if replayed:
        out.append(
            f"{len(replayed)} of the {sum(e.traced for e in seen)} configurations weighed were "
            "replayed through the allocator from traces of the same configuration at other "
            "micro-batches (a batch model: the traces matched event by event, each size linear "
            "in the micro-batch or asked again of its kernel's rule), not traced; the plan's "
            "choice and baseline are traced"
        )
    reasons = sorted({e.batch_note for e in seen if e.batch_note})
    if reasons:
        more = f"; and {len(reasons) - 3} more" if len(reasons) > 3 else ""
        shown = "; ".join(reasons[:3]) + more
        out.append(f"traced where a batch model did not answer: {shown}")
    return out


def fits(ev: Evaluator, c: Candidate) -> bool:
    return any(e.fits for e in ev.evaluate(with_allocators(c)))


def fastest(ev: Evaluator) -> float:
    """The predicted step of the fastest candidate that fits so far (infinite: none fits)."""
    return min((e.step_seconds for e in ev.seen.values() if e.fits), default=math.inf)
