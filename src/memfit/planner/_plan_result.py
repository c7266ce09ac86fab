"""What ``memfit.plan`` returns: the configurations it weighed and the one it chose.

Plain data (no torch), so that renderers, the command line and ``memfit.apply`` read it without
tracing anything. Bytes are ``int``; seconds ``float``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from memfit._display import html_repr
from memfit._units import GiB, format_bytes
from memfit.technique import Technique, element_bytes, techniques_in
from memfit.technique.checkpointing import TECHNIQUE as CHECKPOINTING
from memfit.technique.checkpointing import checkpointing_words, wrapped
from memfit.technique.compilation import TECHNIQUE as MEMORY_BUDGET
from memfit.technique.compilation import budget_words
from memfit.technique.offload import CHECKPOINTS_WORDS, offload_words
from memfit.technique.offload import TECHNIQUE as OFFLOAD

__all__ = [
    "CHECKPOINTS_WORDS",
    "Candidate",
    "Evaluated",
    "Plan",
    "budget_words",
    "checkpointing_words",
    "offload_words",
    "param_bytes",
    "techniques_words",
]


param_bytes = element_bytes  # one home, in the technique layer below the planner


def techniques_words(techniques: tuple[tuple[str, Any], ...]) -> list[str]:
    """Each technique of a candidate in words (``memfit.technique``'s own)."""
    return [technique.words(value) for technique, value in techniques_in(techniques)]


@dataclass(frozen=True, slots=True)
class Candidate:
    """One configuration of a training step: the settings the planner may change.

    ``micro_batch * accumulation`` is the global batch. ``checkpointing`` is
    ``activation_checkpointing``'s value (``False``, ``True``: every block recomputed,
    ``"selective"``: matrix products and attention kept, a fraction: that share of the blocks
    checkpointed in full, spread evenly). ``optimizer`` is a name of
    ``memfit.estimate``'s (``adamw-fused``...), ``allocator_config`` a
    ``PYTORCH_CUDA_ALLOC_CONF`` text (``""``: PyTorch's default). ``memory_budget`` is a
    torch.compile'd model's activation memory budget (``None``: the process's setting, 1.0).
    ``offload`` is the share of the blocks not checkpointed whose saved tensors wait in pinned
    host memory (``memfit.offload_activations``; 0: none); ``offload_checkpoints``, whether the
    checkpointed blocks' inputs do too. ``techniques``: those of ``memfit.technique`` the step
    uses, as a workload keeps them (``(name, value)`` pairs sorted by name).
    """

    micro_batch: int
    accumulation: int
    precision: str
    checkpointing: bool | str | float
    optimizer: str
    allocator_config: str = ""
    memory_budget: float | None = None
    offload: float = 0.0
    offload_checkpoints: bool = False
    techniques: tuple[tuple[str, Any], ...] = ()

    def settings(self) -> dict[str, Any]:
        """The keywords of ``memfit.estimate`` that make this configuration."""
        out: dict[str, Any] = {
            "batch_size": self.micro_batch,
            "accumulation": self.accumulation,
            "precision": self.precision,
            "activation_checkpointing": self.checkpointing,
            "optimizer": self.optimizer,
            "allocator_config": self.allocator_config or None,
        }
        if self.memory_budget is not None:
            out["activation_memory_budget"] = self.memory_budget
        if self.offload:
            out["offload"] = self.offload
        if self.offload_checkpoints:
            out["offload_checkpoints"] = True
        if self.techniques:
            out["techniques"] = dict(self.techniques)
        return out

    def given_techniques(self) -> list[tuple[Technique, Any]]:
        """The techniques this configuration's own settings ask for, with their values as a
        user's live model takes them, in the order they are switched on: a compiled model's
        activation memory budget, checkpointing
        (memfit's wrapping of the blocks where their inputs are offloaded), then activation
        offload around the blocks it leaves."""
        out: list[tuple[Technique, Any]] = []
        if self.memory_budget is not None:  # set on the compiled wrapper the user calls
            out.append((MEMORY_BUDGET, self.memory_budget))
        if self.checkpointing:
            # the model's own switch where it has one: the live model's hook finds it
            by_memfit = wrapped(self.checkpointing, True, self.offload_checkpoints)
            out.append((CHECKPOINTING, (self.checkpointing, by_memfit)))
        if self.offload or self.offload_checkpoints:
            out.append((OFFLOAD, (self.offload, self.offload_checkpoints)))
        return out

    def describe(self) -> str:
        """One line: ``micro-batch 8 x 4, bf16-mixed, full checkpointing, adamw-fused``."""
        ckpt = checkpointing_words(self.checkpointing)
        parts = [f"micro-batch {self.micro_batch} x {self.accumulation}", self.precision, ckpt]
        if self.memory_budget is not None:
            parts[-1] = budget_words(self.memory_budget)  # what replaces checkpointing there
        if self.offload or self.offload_checkpoints:
            parts.append(offload_words(self.offload, self.offload_checkpoints))
        parts.extend(techniques_words(self.techniques))
        parts.append(self.optimizer)
        if self.allocator_config:
            parts.append(self.allocator_config)
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "micro_batch": self.micro_batch,
            "accumulation": self.accumulation,
            "precision": self.precision,
            "activation_checkpointing": self.checkpointing,
            "optimizer": self.optimizer,
            "allocator_config": self.allocator_config,
            "activation_memory_budget": self.memory_budget,
            "offload": self.offload,
            "offload_checkpoints": self.offload_checkpoints,
            "techniques": dict(self.techniques),
        }


@dataclass(frozen=True, slots=True)
class Evaluated:
    """A candidate with its estimate: memory (``needed`` = peak reserved + the memory outside
    PyTorch's allocator, what the budget is held against) and predicted step time."""

    candidate: Candidate
    peak_allocated: int
    peak_reserved: int
    needed: int
    step_seconds: float
    samples_per_second: float
    tokens_per_second: float | None
    bound: str  # "gpu" or "host": what the predicted step waits on
    fits: bool
    changes: tuple[str, ...]  # how it differs from the configuration the user gave
    traced: bool = True  # False: its memory is a replay of another candidate's trace
    step_flops: int = 0  # the FLOPs of one optimizer step as traced (0: not counted)
    # fits only by the allocator freeing its cache in its first steps (``planner._settle``):
    # the least it runs in (with the memory outside PyTorch), and how often it frees the cache
    runs_in: int | None = None
    cache_frees: int = 0
    # the micro-batches whose traces a batch model derived this one's from (its trace never
    # made; the plan's choice and baseline are always traced); () where it was traced
    replayed_from: tuple[int, ...] = ()
    # where it was traced though one configuration's other micro-batches were: why no batch
    # model derived it
    batch_note: str = ""

    @property
    def footprint(self) -> int:
        """The memory it is held against the budget with: ``runs_in`` where it settles so,
        else ``needed``."""
        return self.needed if self.runs_in is None else self.runs_in

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.candidate.to_dict(),
            "peak_allocated": self.peak_allocated,
            "peak_reserved": self.peak_reserved,
            "needed": self.needed,
            "step_seconds": self.step_seconds,
            "samples_per_second": self.samples_per_second,
            "tokens_per_second": self.tokens_per_second,
            "bound": self.bound,
            "fits": self.fits,
            "runs_in": self.runs_in,
            "cache_frees": self.cache_frees,
            "changes": list(self.changes),
            **({"replayed_from": list(self.replayed_from)} if self.replayed_from else {}),
        }


@dataclass(frozen=True)
class Plan:
    """The planner's answer for one workload and budget.

    ``chosen`` is the fastest candidate that fits (``None`` when none does; then ``smallest``
    is the one needing least memory, and ``shortfall`` how far over the budget it is).
    ``candidates`` holds every candidate evaluated, fastest first among those that fit, then
    the ones that do not, least memory first. ``baseline`` is the configuration the user gave,
    evaluated the same way. ``model_key`` identifies the model the plan was made for (its class
    and parameter count), so that ``memfit.apply`` can refuse another.
    """

    model: str
    model_key: str
    budget: int  # the memory budget as given (bytes)
    usable: int  # what a candidate's ``needed`` is held against: the budget less the margin
    margin: float  # the share of the budget kept free
    global_batch: int
    seq_len: int | None
    chosen: Evaluated | None
    candidates: list[Evaluated]
    baseline: Evaluated | None
    smallest: Evaluated | None = None
    shortfall: int = 0
    would_fit: list[str] = field(default_factory=list)  # what else would make it fit
    notes: list[str] = field(default_factory=list)
    calibration: str = ""  # which GPU's measured rates the step times come from
    seconds: float = 0.0  # planning time
    traces: int = 0  # traces run (the rest of the candidates are replays)
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        return self.chosen is not None

    def pareto(self) -> list[Evaluated]:
        """The candidates no other beats on both memory and step time, least memory first."""
        front: list[Evaluated] = []
        for e in sorted(self.candidates, key=lambda e: (e.footprint, e.step_seconds)):
            if not front or e.step_seconds < front[-1].step_seconds:
                front.append(e)
        return front

    def __repr__(self) -> str:
        """One line: the model, the budget, the choice (or how far over the smallest is) and
        how many candidates were weighed; ``candidates`` holds them (a full dump runs to pages).
        """
        fields = [f"model={self.model!r}", f"budget={self.budget} ({self.budget / GiB:.2f} GiB)"]
        if self.chosen is None:
            fields += [
                "chosen=None",
                f"shortfall={self.shortfall} ({self.shortfall / GiB:.2f} GiB)",
            ]
        else:
            c = self.chosen
            fields += [
                f"chosen={c.candidate.describe()!r}",
                f"needs={c.footprint} ({c.footprint / GiB:.2f} GiB)",
                f"step_ms={c.step_seconds * 1e3:.1f}",
            ]
        fields.append(f"candidates=[{len(self.candidates)} evaluated]")
        return f"Plan({', '.join(fields)})"

    def _repr_html_(self) -> str | None:
        """The plan as HTML where a notebook shows it (``memfit.report`` renders it: the
        answer in words, the ranked table with the budget line, the notes)."""
        return html_repr("plan", self)

    def __str__(self) -> str:
        if self.chosen is None:
            return (
                f"Plan for {self.model}: nothing fits {format_bytes(self.budget)}; the smallest "
                f"configuration needs {format_bytes(self.shortfall + self.usable)}."
            )
        c = self.chosen
        return (
            f"Plan for {self.model} in {format_bytes(self.budget)}: {c.candidate.describe()} "
            f"({format_bytes(c.footprint)}, {c.step_seconds * 1e3:.0f} ms a step)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "model_key": self.model_key,
            "budget": self.budget,
            "usable": self.usable,
            "margin": self.margin,
            "global_batch": self.global_batch,
            "seq_len": self.seq_len,
            "fits": self.fits,
            "chosen": self.chosen.to_dict() if self.chosen else None,
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "smallest": self.smallest.to_dict() if self.smallest else None,
            "shortfall": self.shortfall,
            "would_fit": self.would_fit,
            "candidates": [e.to_dict() for e in self.candidates],
            "pareto": [self.candidates.index(e) for e in self.pareto()],
            "notes": self.notes,
            "calibration": self.calibration,
            "seconds": self.seconds,
            "traces": self.traces,
            "versions": self.versions,
        }

    def to_json(self, *, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)
