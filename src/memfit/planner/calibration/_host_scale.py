"""How fast this machine's host issues a step's ops, against the calibration memfit ships.

A step of small kernels waits on Python issuing them, and hosts differ: the same Qwen2.5-0.5B
step on the same GPU model took 383 ms on one H200 machine and 772 ms on another. The shipped
calibration's host costs (seconds per op, by phase and kind of step) were fitted on real
models at a batch of one, where the GPU waits on the host. Here a few of those models run the
same way on this machine, in memfit's loop, under each kind of step the planner times (fp32,
mixed precision, full and selective checkpointing); their forward and backward
seconds, set against what the shipped costs predict for the same traced ops, give one factor
per kind of step. The host costs are scaled by them, so their structure (which phase, which
op) stays the one fitted on many models and only the machine's speed is this one's.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memfit._gpus import GPU

# the models (batch of one, short inputs) and kinds of step measured; ``quick``: the first only
REFERENCE: dict[str, dict[str, Any]] = {
    "gpt2": {"batch_size": 1, "seq_len": 32},
    "tv:resnet50": {"batch_size": 1},
    "bert-base-uncased": {"batch_size": 1, "seq_len": 32},
}
VARIANTS: dict[str, dict[str, Any]] = {
    "fp32": {},
    "bf16-mixed": {"precision": "bf16-mixed"},
    "bf16-mixed, checkpointing": {"precision": "bf16-mixed", "activation_checkpointing": True},
    "bf16-mixed, selective": {"precision": "bf16-mixed", "activation_checkpointing": "selective"},
}
_PHASES = ("forward", "backward")  # the host's own in a step at a batch of one
_STEPS = 10  # steps 3 onwards are timed
_STYLES = ("fp32", "checkpointed", "selective")  # a host key's suffix; else eager's


@dataclass(frozen=True)
class HostRow:
    """One model and kind of step: the host's measured forward and backward seconds (steps 3
    onwards, median) and what the shipped calibration predicts for them."""

    model: str
    variant: str
    style: str
    measured: float
    predicted: float

    @property
    def ratio(self) -> float:
        return self.measured / self.predicted


def measure_rows(
    gpu: GPU, calibration: Any, models: list[str], report: Callable[[str], None] | None = None
) -> list[HostRow]:
    """Each model of ``models`` under each of :data:`VARIANTS`: run on this GPU and traced on
    the host. A variant a model cannot run is left out and reported."""
    from memfit.planner._search import step_style
    from memfit.planner._step_time import step_time
    from memfit.trace import trace_workload
    from memfit.workload import make_workload

    rows = []
    for model, (variant, settings) in itertools.product(models, VARIANTS.items()):
        try:
            workload = make_workload(model, gpu=gpu, steps=_STEPS, **REFERENCE[model], **settings)
            seconds = phase_seconds(workload)[1]
        except Exception as exc:  # a variant this machine cannot run: the others still count
            if report is not None:
                report(f"host: {model} {variant} did not run ({type(exc).__name__}: {exc})")
            continue
        costs = trace_workload(workload, gpu, costs=True).costs
        assert costs is not None
        style = step_style(workload)
        predicted = step_time(costs, calibration, style=style, step=2).phases
        rows.append(
            HostRow(
                model,
                variant,
                style,
                sum(seconds[p] for p in _PHASES),
                sum(predicted[p] for p in _PHASES),
            )
        )
        if report is not None:
            report(f"host: {model} {variant}")
    return rows


def phase_seconds(workload: Any, first: int = 3) -> tuple[dict[str, float], dict[str, float]]:
    """Per phase of ``workload``'s steps from ``first`` on, in memfit's loop on the GPU, the
    median seconds of the phase, the GPU synchronized at each phase boundary; and the median
    seconds from the phase's start until the host had issued its last op (before that
    synchronization: the host's own time, its waits on the GPU's read-backs included)."""
    import torch
    from torch.utils._pytree import tree_map

    from memfit.workload import StepHooks, optimizer_for, prepare_model, run_steps

    net = prepare_model(workload, "cuda")
    optimizer = optimizer_for(workload, net)
    marks: list[tuple[str, float, float]] = []  # label, issued, synchronized

    def phase(label: str) -> None:
        issued = time.perf_counter()
        torch.cuda.synchronize()
        marks.append((label, issued, time.perf_counter()))

    hooks = StepHooks(
        to_device=lambda b: tree_map(lambda t: t.cuda() if isinstance(t, torch.Tensor) else t, b),
        autocast=lambda dtype: torch.autocast("cuda", dtype=dtype),
        grad_scaler=lambda: torch.amp.GradScaler("cuda"),
        phase=phase,
    )
    try:
        run_steps(workload, net, optimizer, hooks)
    finally:
        del net, optimizer
        torch.cuda.empty_cache()
    seconds: dict[str, list[float]] = {}
    issued: dict[str, list[float]] = {}
    for (label, _, start), (_, issue_done, done) in itertools.pairwise(marks):
        step, _, what = label.partition(".")
        if step.startswith("step") and int(step[4:]) >= first:
            seconds.setdefault(what, []).append(done - start)
            issued.setdefault(what, []).append(issue_done - start)
    return (
        {k: statistics.median(v) for k, v in seconds.items()},
        {k: statistics.median(v) for k, v in issued.items()},
    )


def host_factors(rows: list[HostRow]) -> dict[str, float]:
    """Per kind of step (``eager``, ``fp32``, ``checkpointed``, ``selective``), the median of
    its rows' measured over predicted seconds; ``all``, the median over every row (for what no
    kind names: the optimizer, zeroing the gradients, making the input). Kinds with no row take
    ``all``."""
    if not rows:
        raise ValueError("no reference step ran: nothing to scale the host's costs by")
    factors = {"all": statistics.median(r.ratio for r in rows)}
    for style in ("eager", *_STYLES):
        ratios = [r.ratio for r in rows if r.style == style]
        if ratios:
            factors[style] = statistics.median(ratios)
    return factors


def scaled_host(host: dict[str, float], factors: dict[str, float]) -> dict[str, float]:
    """``host`` (seconds per op by ``phase[:conv|:fixed][:style]``) with each cost scaled by
    its kind of step's factor: a key ending in a style takes that style's, a forward or
    backward key without one eager's, every other (optimizer, input, zero_grad, copy,
    default) the factor over all rows."""
    out = {}
    for key, seconds in host.items():
        parts = key.split(":")
        if parts[-1] in _STYLES:
            factor = factors.get(parts[-1], factors["all"])
        elif parts[0] in _PHASES or key == "default":
            factor = factors.get("eager", factors["all"])
        else:
            factor = factors["all"]
        out[key] = seconds * factor
    return out
