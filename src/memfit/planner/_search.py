"""Evaluate the planner's candidates: trace each configuration once, replay it under each
allocator setting, and predict its step time.

A candidate's memory is its estimate (trace, then the allocator emulator); a trace of
``accumulation`` micro-batches runs at most two of them, since every micro-batch after the first
starts from the same state (the gradients held) and peaks the same. Its time is
:func:`~memfit.planner._step_time.step_time` of the same trace, the micro-batches scaled.
Traces are cached by the settings that change them; allocator settings are replays.

Candidates that differ only in their micro-batch (the accumulation making up the same global
batch, and the same number of micro-batches traced) are one configuration at several batch
sizes: once two of them are traced, a batch model (``memfit.trace.BatchTraces``) derives the
trace of the others, memory and costs, and only the allocator is replayed (``Evaluated
.replayed_from``). What the plan returns as its choice (and its baseline) is traced
(:meth:`Evaluator.retrace`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch

from memfit._gpus import GPU
from memfit.allocator import AllocatorConfig
from memfit.estimator import Estimate, estimate_workload
from memfit.planner._plan_result import (
    Candidate,
    Evaluated,
    checkpointing_words,
    offload_words,
    param_bytes,
    techniques_words,
)
from memfit.planner._step_time import Calibration, StepTime, calibration_for, step_time
from memfit.technique import StepFacts, optimizer_variant_of, techniques_in
from memfit.trace import BatchTraces, StepCosts, Trace, trace_workload
from memfit.workload import Workload, partial_fraction

__all__ = ["Evaluator", "candidate_costs", "step_style", "step_time_of", "techniques_seconds"]

TRACED_MICRO_BATCHES = 2  # what a candidate's trace runs of its accumulation (see above)


def step_style(workload: Workload, *, plain: bool = False, compiled: bool = False) -> str:
    """Which host costs of the calibration a step of ``workload`` pays per op (``plain``: as
    if it checkpointed nothing; ``compiled``: its model runs inductor's wrappers, whose ops
    are kernel launches and buffer views from generated code)."""
    if compiled:
        return "compiled"
    if not plain and workload.activation_checkpointing == "selective":
        return "selective"
    if not plain and workload.activation_checkpointing:
        return "checkpointed"
    return "fp32" if workload.precision == "fp32" else "eager"


def candidate_costs(workload: Workload, gpu: GPU) -> tuple[StepCosts, int]:
    """The ops of ``workload``'s step as the planner traces it, and how many micro-batches the
    trace ran (for :func:`step_time_of`)."""
    trace, traced = _short_trace(workload, gpu)
    assert trace.costs is not None
    return trace.costs, traced


def step_time_of(workload: Workload, costs: StepCosts, traced: int, gpu: GPU) -> StepTime:
    """The predicted step of ``workload`` from :func:`candidate_costs`' output."""
    return _predict(workload, costs, traced, calibration_for(gpu)[0])


def shortened(workload: Workload, micro_batches: int) -> Workload:
    """``workload`` traced for two steps of ``micro_batches`` of its micro-batches, the batch
    its caller holds (``batch_held``) still the whole step's."""
    return dataclasses.replace(
        workload,
        accumulation=micro_batches,
        held_micro_batches=workload.held_micro_batches or workload.accumulation,
        steps=2,
    )


def _short_trace(workload: Workload, gpu: GPU, calls: bool = False) -> tuple[Trace, int]:
    """The trace of two steps of ``workload`` with at most two of its micro-batches, costs
    counted (``calls``: kernel calls logged too, for a batch model), and the micro-batches it
    ran."""
    traced = min(workload.accumulation, TRACED_MICRO_BATCHES)
    short = shortened(workload, traced)
    return trace_workload(short, gpu, costs=True, kernel_calls=calls), traced


def _family(c: Candidate) -> Candidate:
    """What candidates share whose traces are one configuration's at several micro-batches:
    all but the micro-batch, its accumulation (the micro-batches traced aside) and the
    allocator."""
    traced = min(c.accumulation, TRACED_MICRO_BATCHES)
    return dataclasses.replace(c, micro_batch=0, accumulation=traced, allocator_config="")


def _predict(
    workload: Workload, costs: StepCosts, traced: int, calibration: Calibration
) -> StepTime:
    timing = _predict_plain(workload, costs, traced, calibration)
    extra = techniques_seconds(workload, calibration)
    if not extra:
        return timing
    return StepTime(
        seconds=timing.seconds + extra,
        gpu_busy=timing.gpu_busy,
        host_busy=timing.host_busy + extra,
        phases={**timing.phases, "techniques": extra},
    )


def techniques_seconds(workload: Workload, calibration: Calibration) -> float:
    """What the workload's techniques add to a step (``memfit.technique``'s ``step_seconds``),
    the GPU waiting on it."""
    if not workload.techniques:
        return 0.0
    facts = StepFacts(
        trained_elements=_trained_elements(workload),
        param_bytes=param_bytes(workload.precision),
        copy_seconds=calibration.copy_seconds,
    )
    return sum(t.step_seconds(v, facts) for t, v in techniques_in(workload.techniques))


def _trained_elements(workload: Workload) -> int:
    """The parameter elements of the workload's model that require a gradient once its
    techniques have made it what the steps train (LoRA freezes the rest); built on the meta
    device: nothing allocated."""
    with torch.device("meta"):
        model = workload.build_model()
        for technique, value in techniques_in(workload.techniques):
            model = technique.prepare(value, model, workload)
    unique = {id(p): p for p in model.parameters()}.values()
    return sum(p.numel() for p in unique if p.requires_grad)


def _predict_plain(
    workload: Workload, costs: StepCosts, traced: int, calibration: Calibration
) -> StepTime:
    def at(style: str) -> StepTime:
        return step_time(
            costs,
            calibration,
            style=style,
            micro_batches=(traced, workload.accumulation),
            variant=optimizer_variant_of(workload.optimizer),
            batch_on_gpu=True,  # what a step applied to the user's batches takes
        )

    fraction = partial_fraction(workload.activation_checkpointing)
    if fraction is None:
        return at(step_style(workload, compiled=costs.compiled))
    # partial checkpointing: the host pays the checkpointed style's per-op cost in that share
    # of the blocks and the plain one elsewhere; the ops themselves are the trace's
    plain, checkpointed = at(step_style(workload, plain=True)), at("checkpointed")
    return StepTime(
        seconds=_mix(plain.seconds, checkpointed.seconds, fraction),
        gpu_busy=_mix(plain.gpu_busy, checkpointed.gpu_busy, fraction),
        host_busy=_mix(plain.host_busy, checkpointed.host_busy, fraction),
        phases={
            k: _mix(v, checkpointed.phases.get(k, v), fraction) for k, v in plain.phases.items()
        },
    )


def _mix(a: float, b: float, share_b: float) -> float:
    return a * (1 - share_b) + b * share_b


@dataclass
class Evaluator:
    """Evaluates candidates of one workload against one budget, tracing each configuration
    once. ``base`` is the user's workload; ``batch_of`` makes a micro-batch of ``n`` samples."""

    base: Workload
    gpu: GPU
    usable: int
    calibration: Calibration
    baseline: Candidate
    seq_len: int | None
    traces: int = 0
    seen: dict[Candidate, Evaluated] = field(default_factory=dict)
    # one configuration's traces by micro-batch, with the batch model that derives the rest
    families: dict[Candidate, BatchTraces] = field(default_factory=dict)
    parameters: tuple[int, int] = (0, 0)  # the model's parameter elements: all, trained
    workers: int = 1  # processes that may trace at once (the hints where nothing fits)
    # the user's techniques every candidate keeps (they change what is trained: LoRA, 4-bit)
    kept: tuple[tuple[str, Any], ...] = ()

    def workload(self, c: Candidate) -> Workload:
        assert self.base.batch_of is not None
        return dataclasses.replace(
            self.base.with_batch_size(c.micro_batch),
            accumulation=c.accumulation,
            precision=c.precision,  # type: ignore[arg-type]
            activation_checkpointing=c.checkpointing,
            optimizer=c.optimizer,
            allocator=AllocatorConfig.parse(c.allocator_config),
            allocator_text=c.allocator_config,
            activation_memory_budget=c.memory_budget,
            offload=c.offload,
            offload_checkpoints=c.offload_checkpoints,
            techniques=c.techniques,
        )

    def evaluate(self, candidates: list[Candidate]) -> list[Evaluated]:
        """Each of ``candidates`` (of one traced configuration: they differ in allocator
        settings only), evaluated; cached."""
        todo = [c for c in candidates if c not in self.seen]
        if todo:
            self._trace_and_replay(todo)
        return [self.seen[c] for c in candidates]

    def _trace_and_replay(self, candidates: list[Candidate]) -> None:
        c = candidates[0]
        family = self._family_of(c)
        trace = family.trace(c.micro_batch)
        note = ""
        if not trace.derived_from:
            self.traces += 1
            note = (
                family.skipped.get(c.micro_batch)
                or (family.refusal if family.model is None else None)
                or ""
            )
        self._replay(candidates, trace, note)

    def retrace(self, candidates: list[Candidate]) -> list[Evaluated]:
        """``candidates`` (one configuration's allocator variants) evaluated again from a trace
        at their own micro-batch; where the first was derived here, the derivation is checked
        against it (a model that derived it otherwise is dropped)."""
        c = candidates[0]
        family = self._family_of(c)
        derived = family.model.trace_at(c.micro_batch) if family.model is not None else None
        if isinstance(derived, Trace):
            trace = family.verify(c.micro_batch, derived)
        else:
            trace = _short_trace(self.workload(c), self.gpu)[0]
        self.traces += 1
        self._replay(candidates, trace, "")
        return [self.seen[x] for x in candidates]

    def _family_of(self, c: Candidate) -> BatchTraces:
        key = _family(c)
        found = self.families.get(key)
        if found is None:
            total = c.micro_batch * c.accumulation

            def trace_at(micro: int, calls: bool) -> Trace:
                # the whole batch in one micro-batch: no other micro-batch traces like it
                at = dataclasses.replace(c, micro_batch=micro, accumulation=total // micro)
                return _short_trace(self.workload(at), self.gpu, calls and micro < total)[0]

            found = self.families[key] = BatchTraces(trace_at)
        return found

    def _replay(self, candidates: list[Candidate], trace: Trace, note: str) -> None:
        """Each of ``candidates`` from ``trace`` (of the first's configuration), replayed under
        its allocator settings; ``note``: why a batch model did not derive it, where one was
        tried."""
        first = self.workload(candidates[0])
        traced = min(first.accumulation, TRACED_MICRO_BATCHES)
        assert trace.costs is not None
        timing = _predict(first, trace.costs, traced, self.calibration)
        micro_flops = sum(f for _, f, _ in trace.costs.total("step2.").ops)
        step_flops = micro_flops * first.accumulation // traced
        for i, c in enumerate(candidates):
            w = self.workload(c)
            estimate = estimate_workload(
                dataclasses.replace(w, accumulation=traced), trace=trace, setup_note=False
            )
            self.seen[c] = self._evaluated(
                c,
                estimate,
                timing,
                traced=i == 0,
                step_flops=step_flops,
                replayed_from=trace.derived_from,
                batch_note=note,
            )

    def _evaluated(
        self,
        c: Candidate,
        estimate: Estimate,
        timing: StepTime,
        *,
        traced: bool,
        step_flops: int = 0,
        replayed_from: tuple[int, ...] = (),
        batch_note: str = "",
    ) -> Evaluated:
        """``c`` as the search ranks it: its estimate's peaks and the CUDA context it needs
        besides, its predicted step time, where its trace came from."""
        samples = c.micro_batch * c.accumulation
        allocated, reserved = estimate.peak_allocated, estimate.peak_reserved
        needed = reserved + estimate.non_pytorch
        per_second = samples / timing.seconds
        return Evaluated(
            candidate=c,
            peak_allocated=allocated,
            peak_reserved=reserved,
            needed=needed,
            step_seconds=timing.seconds,
            samples_per_second=per_second,
            tokens_per_second=per_second * self.seq_len if self.seq_len else None,
            bound=timing.bound,
            fits=needed <= self.usable,
            changes=changes(self.baseline, c),
            traced=traced,
            step_flops=step_flops,
            replayed_from=replayed_from,
            batch_note=batch_note,
        )


def changes(baseline: Candidate, c: Candidate) -> tuple[str, ...]:
    """How ``c`` differs from the user's configuration, in words."""
    out = []
    if (c.micro_batch, c.accumulation) != (baseline.micro_batch, baseline.accumulation):
        out.append(f"micro-batch {c.micro_batch} with {c.accumulation}-way accumulation")
    if c.precision != baseline.precision:
        out.append(f"precision {c.precision}")
    if c.checkpointing != baseline.checkpointing:
        out.append(
            checkpointing_words(c.checkpointing).replace(
                "checkpointing", "activation checkpointing", 1
            )
        )
    if c.memory_budget != baseline.memory_budget and c.memory_budget is not None:
        out.append(f"torch.compile activation memory budget {c.memory_budget:g}")
    if c.offload != baseline.offload:
        out.append(offload_words(c.offload) or "no activation offload")
    if c.offload_checkpoints != baseline.offload_checkpoints:
        out.append(offload_words(0.0, True) or "checkpointed inputs kept")
    if c.techniques != baseline.techniques:
        out.extend(techniques_words(c.techniques) or ["none of memfit's techniques"])
    if c.optimizer != baseline.optimizer:
        out.append(f"optimizer {c.optimizer}")
    if c.allocator_config != baseline.allocator_config:
        out.append(f"PYTORCH_CUDA_ALLOC_CONF={c.allocator_config or '(default)'}")
    return tuple(out)
