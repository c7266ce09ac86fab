"""The planner's last steps: the chosen candidate estimated with its whole accumulation, and
the model's identity for ``memfit.apply`` (what would make a budget nothing fits work:
``_would_fit``)."""

from __future__ import annotations

import dataclasses
import math

import torch

from memfit._units import format_bytes
from memfit.estimator import estimate_workload
from memfit.planner._model_key import model_key
from memfit.planner._plan_result import Evaluated
from memfit.planner._search import TRACED_MICRO_BATCHES, Evaluator
from memfit.workload import Workload

__all__ = ["FULL_CHECK_LIMIT", "check_chosen", "margin_note", "model_key_of"]

FULL_CHECK_LIMIT = 8  # longest accumulation traced in full for the chosen candidate


def check_chosen(ev: Evaluator, chosen: Evaluated) -> tuple[Evaluated, str | None]:
    """``chosen`` estimated with its whole accumulation (when it is longer than the traced two
    micro-batches and at most :data:`FULL_CHECK_LIMIT`); the larger peak is kept."""
    c = chosen.candidate
    if c.accumulation <= TRACED_MICRO_BATCHES:
        return chosen, None
    if c.accumulation > FULL_CHECK_LIMIT:
        return chosen, (
            f"the chosen {c.accumulation}-way accumulation was estimated from two micro-batches "
            "(every later one starts from the same state)"
        )
    estimate = estimate_workload(dataclasses.replace(ev.workload(c), steps=2))
    ev.traces += 1
    needed = max(chosen.needed, estimate.peak_reserved + estimate.non_pytorch)
    checked = dataclasses.replace(
        chosen,
        peak_allocated=max(chosen.peak_allocated, estimate.peak_allocated),
        peak_reserved=max(chosen.peak_reserved, estimate.peak_reserved),
        needed=needed,
        fits=needed <= ev.usable,
    )
    ev.seen[c] = checked
    return checked, None


def margin_note(ev: Evaluator, chosen: Evaluated, tie: float) -> str | None:
    """Where a candidate faster than ``chosen`` by more than ``tie`` fits the budget but not the
    margin kept free, a note naming the fastest such and the margin that would choose it (the
    trial that measures plans under the bare budget finds those: ResNet-50 at 4 GiB on an H200,
    2026-12-03, 64 x 2 without checkpointing ran 8% faster than the plan, in 4.26 of 4.29 GB)."""
    total = ev.gpu.total
    faster = [
        e
        for e in ev.seen.values()
        if not e.fits and e.needed <= total and e.step_seconds < chosen.step_seconds * (1 - tie)
    ]
    if not faster:
        return None
    best = min(faster, key=lambda e: (e.step_seconds, e.needed))
    margin = math.floor((1 - best.needed / total) * 100) / 100
    return (
        f"{best.candidate.describe()} is predicted {chosen.step_seconds / best.step_seconds:.1f}x "
        f"as fast and needs {format_bytes(best.needed)}: within the {format_bytes(total)} budget "
        f"but not the {format_bytes(ev.usable)} left by the margin; margin={margin:.2f} "
        f"(--margin {margin:.2f}) would choose it, with less room for what the estimate does "
        "not see (other processes, a library's own buffers)"
    )


def model_key_of(workload: Workload) -> str:
    """:func:`model_key` of the workload's model, built on the meta device (no memory)."""
    with torch.device("meta"):
        model = workload.build_model()
    return model_key(model)
