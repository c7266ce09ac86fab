"""Hand-made plans (:class:`memfit.planner.Plan`) for the tests of their rendering and of
``memfit plan``: no trace, just the dataclasses.

``fitting_plan()``: 8 candidates for a 24 GiB budget, 5 that fit (the fastest chosen) and 3
that do not, among them the user's own configuration. ``nothing_fits_plan()``: the same
workload in 4 GiB, where nothing fits.
"""

from __future__ import annotations

from typing import Any

from memfit._units import GiB, MiB
from memfit.planner import Candidate, Evaluated, Plan

SEQ = 1024
GLOBAL = 32


def _evaluated(
    micro: int,
    precision: str,
    checkpointing: bool | str,
    optimizer: str,
    needed: int,
    ms: float,
    usable: int,
    *,
    allocator: str = "",
    bound: str = "gpu",
    changes: tuple[str, ...] = (),
    tokens: bool = True,
) -> Evaluated:
    candidate = Candidate(micro, GLOBAL // micro, precision, checkpointing, optimizer, allocator)
    samples = GLOBAL / (ms / 1e3)
    return Evaluated(
        candidate=candidate,
        peak_allocated=needed - 2 * GiB,
        peak_reserved=needed - 800 * MiB,
        needed=needed,
        step_seconds=ms / 1e3,
        samples_per_second=samples,
        tokens_per_second=samples * SEQ if tokens else None,
        bound=bound,
        fits=needed <= usable,
        changes=changes,
    )


def _ordered(candidates: list[Evaluated]) -> list[Evaluated]:
    """The plan's order: fitting ones fastest first, then the rest least memory first."""
    fit = sorted((e for e in candidates if e.fits), key=lambda e: e.step_seconds)
    over = sorted((e for e in candidates if not e.fits), key=lambda e: e.needed)
    return fit + over


def _candidates(usable: int) -> tuple[list[Evaluated], Evaluated]:
    """Eight candidates, in the plan's order, and the user's own configuration among them."""

    def ev(
        micro: int,
        precision: str,
        ckpt: bool | str,
        opt: str,
        needed: int,
        ms: float,
        **kwargs: Any,
    ) -> Evaluated:
        return _evaluated(micro, precision, ckpt, opt, needed, ms, usable, **kwargs)

    yours = ev(32, "fp32", False, "adamw", 40 * GiB, 900.0, changes=())
    cands = [
        yours,
        ev(
            8,
            "bf16-mixed",
            "selective",
            "adamw-fused",
            20 * GiB,
            420.0,
            changes=(
                "micro-batch 8 with 4 accumulation steps (was 32 x 1): the global batch stays 32",
                "precision bf16-mixed (was fp32)",
                "selective checkpointing (was none)",
                "optimizer adamw-fused (was adamw)",
            ),
        ),
        ev(16, "bf16-mixed", True, "adamw-fused", 21 * GiB, 470.0),
        ev(4, "bf16-mixed", False, "adamw-fused", 18 * GiB, 520.0, bound="host"),
        ev(8, "fp32", True, "adamw-foreach", 16 * GiB, 800.0),
        ev(
            2,
            "bf16",
            True,
            "adamw",
            12 * GiB,
            980.0,
            allocator="expandable_segments:True",
            bound="host",
        ),
        ev(32, "bf16-mixed", False, "adamw-fused", 30 * GiB, 380.0),
        ev(16, "fp32", "selective", "adamw", 26 * GiB, 700.0),
    ]
    return _ordered(cands), yours


def fitting_plan() -> Plan:
    budget = 24 * GiB
    usable = int(budget * 0.95)
    candidates, yours = _candidates(usable)
    chosen = candidates[0]
    assert chosen.fits
    return Plan(
        model="gpt2",
        model_key="GPT2LMHeadModel:124439808",
        budget=budget,
        usable=usable,
        margin=0.05,
        global_batch=GLOBAL,
        seq_len=SEQ,
        chosen=chosen,
        candidates=candidates,
        baseline=yours,
        notes=["Step times assume the GPU runs nothing else."],
        calibration="H200 (benchmarks/results/h200, 2026-12-01)",
        seconds=12.5,
        traces=3,
        versions={"memfit": "0.1.0", "torch": "2.14.1"},
    )


def nothing_fits_plan() -> Plan:
    budget = 4 * GiB
    usable = int(budget * 0.95)
    candidates, yours = _candidates(usable)
    assert not any(e.fits for e in candidates)
    smallest = min(candidates, key=lambda e: e.needed)
    return Plan(
        model="gpt2",
        model_key="GPT2LMHeadModel:124439808",
        budget=budget,
        usable=usable,
        margin=0.05,
        global_batch=GLOBAL,
        seq_len=SEQ,
        chosen=None,
        candidates=candidates,
        baseline=yours,
        smallest=smallest,
        shortfall=smallest.needed - usable,
        would_fit=[
            "sequences of 256 tokens: the smallest configuration then needs 3.10 GiB",
            "a GPU with at least 12.00 GiB",
        ],
        calibration="H200 (benchmarks/results/h200, 2026-12-01)",
        seconds=3.0,
        traces=2,
    )


def many_plan(n: int = 40) -> Plan:
    """A plan of ``n`` candidates that fit and 10 that do not, for the row limit."""
    budget = 80 * GiB
    usable = int(budget * 0.95)
    cands = [
        _evaluated(
            1 + i % 32,
            "bf16-mixed",
            bool(i % 2),
            "adamw",
            (10 + i) * GiB,
            300.0 + i,
            usable,
            tokens=False,
        )
        for i in range(n)
    ]
    cands += [
        _evaluated(16 + i, "fp32", False, "adamw", (80 + i) * GiB, 200.0 + i, usable, tokens=False)
        for i in range(10)
    ]
    yours = cands[-1]
    ordered = _ordered(cands)
    return Plan(
        model="bert-base-uncased",
        model_key="BertForMaskedLM:109514298",
        budget=budget,
        usable=usable,
        margin=0.05,
        global_batch=GLOBAL,
        seq_len=None,
        chosen=ordered[0],
        candidates=ordered,
        baseline=yours,
    )
