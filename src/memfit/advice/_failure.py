"""What would have avoided an out-of-memory failure, ranked by the bytes each fix is expected
to save (the OOM report's fixes; ``memfit.oom`` gathers the :class:`Failure` facts).

Allocator settings are measured: the recorded trace is replayed under each setting
(``memfit.snapshot.report``'s what-ifs), and the saving is the drop in peak reserved memory.
Without a trace, expandable segments are bounded by the free memory stranded in PyTorch's
partly used segments at the failure.

The model-side fixes scale the *working set* at the failure with the factors of
:mod:`memfit.advice._factors`: activation checkpointing saves ~60% of it (for ~25% more step
time); bf16 autocast ~30% of it, less the 16-bit weight copies autocast keeps (half the fp32
parameter bytes); a micro-batch ``k`` times smaller keeps ~1/k of it. They are estimates for
the moment of the failure; the rest of the step may need more, which ``memfit estimate``
predicts before a run.
"""

from __future__ import annotations

from dataclasses import dataclass

from memfit._choices import OPTIMIZERS
from memfit._units import MiB, format_bytes
from memfit.advice._allocator import WhatIf, alloc_conf_how
from memfit.advice._factors import CHECKPOINTING, MICROBATCH_SPLITS, MIXED_PRECISION
from memfit.advice._fix import Change, Fix, How, covers, rank

__all__ = ["Failure", "ModelInfo", "failure_fixes"]

_STRANDED_MIN = 64 * MiB  # below this, stranded free memory is not worth a fix
_ALLOCATOR_COST = "none measurable in most training loops; set before the process starts"


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What the advice needs of the model and optimizer of the failing program (bytes)."""

    parameter_bytes: int
    fp32_bytes: int  # of the parameters, those in float32
    optimizer: str | None  # the optimizer's class name (``AdamW``)
    optimizer_fused: bool | None
    checkpointing: bool  # activation checkpointing is on
    huggingface: bool  # a transformers model (it has gradient_checkpointing_enable)


@dataclass(frozen=True, slots=True)
class Failure:
    """The facts of an out-of-memory failure that decide the advice. Sizes in bytes.

    ``working_set`` is allocated memory minus parameters, gradients and optimizer state
    (``None`` when no model was found); ``stranded`` the free memory in partly used segments;
    ``replayed`` the allocator what-ifs of the recorded trace (the recorded row left out),
    ``None`` when the trace was not replayed; ``command`` the program's command line.
    """

    shortfall: int
    working_set: int | None
    training: bool
    in_optimizer_step: bool
    autocast: bool | None  # the failing allocation ran under autocast
    expandable: bool  # expandable segments were on
    stranded: int | None
    command: str
    model: ModelInfo | None = None
    replayed: tuple[WhatIf, ...] | None = None


def _allocator_fix(failure: Failure, notes: list[str]) -> Fix | None:
    rows = list(failure.replayed or ())
    tried = [r for r in rows if r.saved is not None and r.saved > 0]
    if tried:
        best = max(tried, key=lambda r: r.saved or 0)
        saving = best.saved or 0
        peak = best.peak_reserved or 0
        note = f" ({best.note})" if best.note else ""
        return Fix(
            name=f"Allocator setting {best.label}",
            saving=saving,
            basis=(
                f"replay of the recorded trace: peak reserved {format_bytes(peak)} instead of "
                f"{format_bytes(peak + saving)}{note}"
            ),
            covers=covers(saving, failure.shortfall),
            how=alloc_conf_how(best.label, failure.command),
            cost=_ALLOCATOR_COST,
            change=Change("allocator_config", best.label),
        )
    if rows:
        notes.append(
            "No allocator setting lowers the recorded trace's peak reserved memory "
            f"(replayed: {', '.join(r.label for r in rows)})."
        )
        return None
    stranded = failure.stranded
    if failure.expandable or stranded is None or stranded < _STRANDED_MIN:
        return None
    return Fix(
        name="Allocator setting expandable_segments:True",
        saving=stranded,
        basis=(
            "upper bound: the free memory stranded in PyTorch's partly used segments at the "
            "failure (no trace to replay; keep record_history on to measure it)"
        ),
        covers=covers(stranded, failure.shortfall),
        how=alloc_conf_how("expandable_segments:True", failure.command),
        cost=_ALLOCATOR_COST,
        change=Change("allocator_config", "expandable_segments:True"),
    )


def _working_basis(working: int | None, share: str) -> str:
    if working is None:
        return (
            "not estimated: no model or optimizer was found in the failing program's frames, "
            "so the working set is unknown"
        )
    return f"estimate: {share} ({format_bytes(working)} at the failure)"


def _checkpointing(failure: Failure) -> Fix:
    model, working = failure.model, failure.working_set
    saving = None if working is None else CHECKPOINTING.of(working)
    how: tuple[How, ...]
    if model is not None and model.huggingface:
        how = (
            (
                "",
                "model.gradient_checkpointing_enable("
                'gradient_checkpointing_kwargs={"use_reentrant": False})',
            ),
            ("Hugging Face Trainer", "--gradient_checkpointing"),
        )
    else:
        how = (
            (
                "in the model's forward, for each block",
                "x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)",
            ),
        )
    return Fix(
        name="Activation checkpointing",
        saving=saving,
        basis=_working_basis(working, f"~{CHECKPOINTING.share:.0%} of the working set"),
        covers=covers(saving, failure.shortfall),
        how=(*how, ("predict it first", "memfit estimate MODEL ... --checkpointing")),
        cost=f"{CHECKPOINTING.cost} (the forward pass runs twice for the checkpointed blocks)",
        change=Change("activation_checkpointing", True),
    )


def _micro_batch(failure: Failure) -> Fix:
    working, shortfall = failure.working_set, failure.shortfall
    splits = MICROBATCH_SPLITS
    k = splits[0]
    if working is not None:
        k = next((s for s in splits if working * (s - 1) // s >= shortfall), splits[-1])
    saving = None if working is None else working * (k - 1) // k
    how: tuple[How, ...]
    if failure.training:
        name = f"Micro-batch {k}x smaller, gradients accumulated over {k} steps"
        how = (
            (
                f"batch size B -> B/{k}, then",
                f"(loss / {k}).backward()  # each micro-batch; every {k} of them: "
                "optimizer.step(); optimizer.zero_grad()",
            ),
            (
                "Hugging Face Trainer",
                f"--per_device_train_batch_size B/{k} --gradient_accumulation_steps {k}",
            ),
            ("Lightning", f"Trainer(accumulate_grad_batches={k})"),
        )
        cost = "same effective batch; a little slower (smaller kernels, more steps)"
    else:
        name = f"Batch {k}x smaller"
        how = (("", f"batch size B -> B/{k}"),)
        cost = "more forward passes for the same data"
    return Fix(
        name=name,
        saving=saving,
        basis=_working_basis(working, f"{k - 1}/{k} of the working set"),
        covers=covers(saving, shortfall),
        how=how,
        cost=cost,
        change=Change("microbatches", k),
    )


def _mixed_precision(failure: Failure) -> Fix | None:
    model, working = failure.model, failure.working_set
    if model is not None and model.parameter_bytes and model.fp32_bytes < model.parameter_bytes / 2:
        return None  # the weights are already 16-bit
    fp32 = model.fp32_bytes if model is not None else 0
    share = MIXED_PRECISION.share
    how: tuple[How, ...]
    if failure.training:
        saving = None if working is None else max(MIXED_PRECISION.of(working) - fp32 // 2, 0)
        basis = _working_basis(
            working, f"~{share:.0%} of the working set, less 16-bit copies of the weights"
        )
        if failure.autocast is None:
            basis += "; assumes the forward pass does not already run under autocast"
        how = (
            ("", 'with torch.autocast("cuda", dtype=torch.bfloat16): loss = loss_fn(model(x), y)'),
            ("Hugging Face Trainer", "--bf16"),
            ("Lightning", 'Trainer(precision="bf16-mixed")'),
            ("GPUs without bf16 (before Ampere)", "dtype=torch.float16, with torch.amp.GradScaler"),
        )
        cost = f"{MIXED_PRECISION.cost}; check the loss curve once"
        change = Change("precision", "bf16-mixed")
    else:
        saving = None if working is None else fp32 // 2 + MIXED_PRECISION.of(working)
        basis = _working_basis(
            working, f"half the fp32 weights and ~{share:.0%} of the working set"
        )
        how = (
            ("", "model = model.to(torch.bfloat16)"),
            ("or, keeping fp32 weights", 'with torch.autocast("cuda", dtype=torch.bfloat16): ...'),
        )
        cost = f"{MIXED_PRECISION.cost}; compare the outputs once"
        change = Change("precision", "bf16")
    return Fix(
        name="Mixed precision (bf16)",
        saving=saving,
        basis=basis,
        covers=covers(saving, failure.shortfall),
        how=how,
        cost=cost,
        change=change,
    )


def _fused_optimizer(failure: Failure) -> Fix | None:
    model = failure.model
    if model is None or model.optimizer is None or model.optimizer_fused:
        return None
    saving = model.parameter_bytes
    fused = f"{model.optimizer.lower()}-fused"
    return Fix(
        name=f"Fused {model.optimizer} step",
        saving=saving,
        basis="estimate: a foreach optimizer step's temporaries are about one copy of the "
        "parameters",
        covers=covers(saving, failure.shortfall),
        how=(
            ("", f"torch.optim.{model.optimizer}(model.parameters(), ..., fused=True)"),
            ("or, slower and without temporaries", "foreach=False"),
        ),
        cost="none: the fused step is usually the fastest",
        change=Change("optimizer", fused) if fused in OPTIMIZERS else None,
    )


def failure_fixes(failure: Failure) -> tuple[list[Fix], list[str]]:
    """The fixes that apply, largest expected saving first, and notes on those left out."""
    notes: list[str] = []
    fixes: list[Fix | None] = [_allocator_fix(failure, notes)]
    if failure.expandable:
        notes.append("Expandable segments are already on.")
    if failure.in_optimizer_step:
        notes.append(
            "The allocation failed in the optimizer step, after the activations were freed: "
            "checkpointing, smaller micro-batches and mixed precision do little here."
        )
        fixes.append(_fused_optimizer(failure))
    else:
        model = failure.model
        if failure.training and model is not None and model.checkpointing:
            notes.append("Activation checkpointing is already on.")
        elif failure.training:
            fixes.append(_checkpointing(failure))
        fixes.append(_micro_batch(failure))
        if failure.autocast is True:
            notes.append("The failing allocation ran under autocast: mixed precision is on.")
        else:
            fixes.append(_mixed_precision(failure))
    kept = rank(fixes)
    shortfall = failure.shortfall
    if kept and shortfall > 0 and not any(f.covers for f in kept):
        which = "No single fix" if all(f.saving is not None for f in kept) else "No fix estimated"
        notes.append(
            f"{which} covers the {format_bytes(shortfall)} shortfall: combine them, or "
            "shard the model over more GPUs (FSDP)."
        )
    return kept, notes
