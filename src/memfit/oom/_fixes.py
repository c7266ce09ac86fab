"""What would have avoided the error, ranked by the bytes each fix is expected to save.

Allocator settings are measured: the recorded trace is replayed under each setting
(``memfit.snapshot.report``'s what-ifs), and the saving is the drop in peak reserved memory.
Without a trace, expandable segments are bounded by the free memory stranded in PyTorch's
partly used segments at the failure.

The model-side fixes scale the *working set* at the failure: allocated memory minus the
parameters, gradients and optimizer state of the modules and optimizer found in the failing
program's frames (activations, saved tensors and temporaries). The factors are measured on an
H200 with torch 2.11 (``benchmarks/results/h200-2026-11-30``):

* activation checkpointing kept 41% of the working set of BERT-base (b32, s512, fp32,
  AdamW: 14.79 -> 6.06 GiB): saving ~60%, for ~25% more step time (278 -> 350 ms);
* bf16 autocast saved 28% of it for BERT-base and 48% for ResNet-50 (b64), less the 16-bit
  weight copies autocast keeps (half the fp32 parameter bytes): saving ~30% of it minus those;
* a micro-batch ``k`` times smaller keeps ~1/k of it (activations scale with the batch).

They are estimates for the moment of the failure; the rest of the step may need more, which
``memfit estimate`` predicts before a run.
"""

from __future__ import annotations

from dataclasses import dataclass

from memfit._units import MiB, format_bytes
from memfit.oom._incident import Incident
from memfit.snapshot import SnapshotReport

__all__ = ["CHECKPOINT_SAVING", "MIXED_SAVING", "Fix", "command_line", "rank_fixes"]

CHECKPOINT_SAVING = 0.6
MIXED_SAVING = 0.3
_STRANDED_MIN = 64 * MiB  # below this, stranded free memory is not worth a fix
_SPLITS = (2, 4, 8, 16)
_ALLOCATOR_COST = "none measurable in most training loops; set before the process starts"

Step = tuple[str, str]  # (where, code): where to put it ("" for a plain command), what to write


@dataclass(frozen=True, slots=True)
class Fix:
    """One way to avoid the error. ``saving`` is in bytes; ``None`` when it cannot be estimated.

    ``covers`` says whether the saving is at least the shortfall of the failed allocation
    (``None`` when either is unknown); ``how`` holds the concrete settings and commands, as
    ``(where, code)`` pairs (``where`` is empty for a shell command or plain Python).
    """

    name: str
    saving: int | None
    basis: str
    covers: bool | None
    how: tuple[Step, ...]
    cost: str

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "saving": self.saving,
            "basis": self.basis,
            "covers_shortfall": self.covers,
            "how": [{"where": where, "code": code} for where, code in self.how],
            "cost": self.cost,
        }


def command_line(incident: Incident) -> str:
    """The failing program's command line, as a user would type it."""
    argv = list(incident.argv) or ["train.py"]
    if argv[0].endswith(".py") or argv[0] in ("-", "-c", "-m"):
        argv.insert(0, "python")
    return " ".join(argv)


def _covers(saving: int | None, shortfall: int) -> bool | None:
    if saving is None or shortfall <= 0:
        return None
    return saving >= shortfall


def _alloc_conf(setting: str, command: str) -> tuple[Step, ...]:
    steps: tuple[Step, ...] = (
        ("", f"PYTORCH_CUDA_ALLOC_CONF={setting} {command}"),
        ("with memfit run", f"PYTORCH_CUDA_ALLOC_CONF={setting} memfit run -- {command}"),
    )
    if setting.startswith("garbage_collection"):
        steps += (
            (
                "and in the program, before the first CUDA allocation (the collection acts "
                "only under a memory fraction)",
                "torch.cuda.set_per_process_memory_fraction(0.99)",
            ),
        )
    return steps


def _allocator_fix(
    incident: Incident, analysis: SnapshotReport | None, notes: list[str]
) -> Fix | None:
    command = command_line(incident)
    rows = [r for r in analysis.what_if if not r.recorded] if analysis is not None else []
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
            covers=_covers(saving, incident.shortfall),
            how=_alloc_conf(best.label, command),
            cost=_ALLOCATOR_COST,
        )
    if rows:
        notes.append(
            "No allocator setting lowers the recorded trace's peak reserved memory "
            f"(replayed: {', '.join(r.label for r in rows)})."
        )
        return None
    stranded = incident.fragmentation
    if incident.expandable or stranded is None or stranded < _STRANDED_MIN:
        return None
    return Fix(
        name="Allocator setting expandable_segments:True",
        saving=stranded,
        basis=(
            "upper bound: the free memory stranded in PyTorch's partly used segments at the "
            "failure (no trace to replay; keep record_history on to measure it)"
        ),
        covers=_covers(stranded, incident.shortfall),
        how=_alloc_conf("expandable_segments:True", command),
        cost=_ALLOCATOR_COST,
    )


def _working_basis(working: int | None, share: str) -> str:
    if working is None:
        return (
            "not estimated: no model or optimizer was found in the failing program's frames, "
            "so the working set is unknown"
        )
    return f"estimate: {share} ({format_bytes(working)} at the failure)"


def _checkpointing(incident: Incident, working: int | None) -> Fix:
    model = incident.model
    saving = None if working is None else int(CHECKPOINT_SAVING * working)
    how: tuple[Step, ...]
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
        basis=_working_basis(working, f"~{CHECKPOINT_SAVING:.0%} of the working set"),
        covers=_covers(saving, incident.shortfall),
        how=(*how, ("predict it first", "memfit estimate MODEL ... --checkpointing")),
        cost="~25% more step time (the forward pass runs twice for the checkpointed blocks)",
    )


def _micro_batch(incident: Incident, working: int | None, training: bool) -> Fix:
    k = 2
    if working is not None:
        k = next((s for s in _SPLITS if working * (s - 1) // s >= incident.shortfall), _SPLITS[-1])
    saving = None if working is None else working * (k - 1) // k
    how: tuple[Step, ...]
    if training:
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
        covers=_covers(saving, incident.shortfall),
        how=how,
        cost=cost,
    )


def _mixed_precision(incident: Incident, working: int | None, training: bool) -> Fix | None:
    model = incident.model
    if model is not None and model.parameter_bytes and model.fp32_bytes < model.parameter_bytes / 2:
        return None  # the weights are already 16-bit
    fp32 = model.fp32_bytes if model is not None else 0
    how: tuple[Step, ...]
    if training:
        saving = None if working is None else max(int(MIXED_SAVING * working) - fp32 // 2, 0)
        basis = _working_basis(
            working, f"~{MIXED_SAVING:.0%} of the working set, less 16-bit copies of the weights"
        )
        if incident.autocast is None:
            basis += "; assumes the forward pass does not already run under autocast"
        how = (
            ("", 'with torch.autocast("cuda", dtype=torch.bfloat16): loss = loss_fn(model(x), y)'),
            ("Hugging Face Trainer", "--bf16"),
            ("Lightning", 'Trainer(precision="bf16-mixed")'),
            ("GPUs without bf16 (before Ampere)", "dtype=torch.float16, with torch.amp.GradScaler"),
        )
        cost = "usually faster; check the loss curve once"
    else:
        saving = None if working is None else fp32 // 2 + int(MIXED_SAVING * working)
        basis = _working_basis(working, "half the fp32 weights and ~30% of the working set")
        how = (
            ("", "model = model.to(torch.bfloat16)"),
            ("or, keeping fp32 weights", 'with torch.autocast("cuda", dtype=torch.bfloat16): ...'),
        )
        cost = "usually faster; compare the outputs once"
    return Fix(
        name="Mixed precision (bf16)",
        saving=saving,
        basis=basis,
        covers=_covers(saving, incident.shortfall),
        how=how,
        cost=cost,
    )


def _fused_optimizer(incident: Incident) -> Fix | None:
    model = incident.model
    if model is None or model.optimizer is None or model.optimizer_fused:
        return None
    saving = model.parameter_bytes
    return Fix(
        name=f"Fused {model.optimizer} step",
        saving=saving,
        basis="estimate: a foreach optimizer step's temporaries are about one copy of the "
        "parameters",
        covers=_covers(saving, incident.shortfall),
        how=(
            ("", f"torch.optim.{model.optimizer}(model.parameters(), ..., fused=True)"),
            ("or, slower and without temporaries", "foreach=False"),
        ),
        cost="none: the fused step is usually the fastest",
    )


def rank_fixes(
    incident: Incident, analysis: SnapshotReport | None = None
) -> tuple[list[Fix], list[str]]:
    """The fixes that apply, largest expected saving first, and notes on those left out."""
    notes: list[str] = []
    fixes: list[Fix | None] = [_allocator_fix(incident, analysis, notes)]
    if incident.expandable:
        notes.append("Expandable segments are already on.")
    working = incident.activations
    training = incident.grad_enabled is not False
    if incident.phase == "optimizer step":
        notes.append(
            "The allocation failed in the optimizer step, after the activations were freed: "
            "checkpointing, smaller micro-batches and mixed precision do little here."
        )
        fixes.append(_fused_optimizer(incident))
    else:
        if training and incident.model is not None and incident.model.checkpointing:
            notes.append("Activation checkpointing is already on.")
        elif training:
            fixes.append(_checkpointing(incident, working))
        fixes.append(_micro_batch(incident, working, training))
        if incident.autocast is True:
            notes.append("The failing allocation ran under autocast: mixed precision is on.")
        else:
            fixes.append(_mixed_precision(incident, working, training))
    kept = [f for f in fixes if f is not None]
    kept.sort(key=lambda f: (f.saving is None, -(f.saving or 0)))
    if kept and incident.shortfall > 0 and not any(f.covers for f in kept):
        which = "No single fix" if all(f.saving is not None for f in kept) else "No fix estimated"
        notes.append(
            f"{which} covers the {format_bytes(incident.shortfall)} shortfall: combine them, or "
            "shard the model over more GPUs (FSDP)."
        )
    return kept, notes
