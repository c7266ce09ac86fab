"""What an estimate returns: peaks, the breakdown at the peak, a timeline and a verdict."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from memfit._display import html_repr
from memfit._errors import InvalidInputError
from memfit._events import Category
from memfit._gpus import GPU, resolve_gpu
from memfit._units import GiB, format_bytes
from memfit.estimator._versions import Versions

__all__ = ["Estimate", "RankPeak", "Timeline", "Verdict", "WorkloadSummary"]


@dataclass(frozen=True, slots=True)
class RankPeak:
    """One rank's peaks in a data-parallel job. ``traced``: its own step was traced; else it
    runs the same allocations as ``like`` (a rank that was)."""

    rank: int
    peak_allocated: int
    peak_reserved: int
    traced: bool
    like: int


@dataclass(frozen=True, slots=True)
class WorkloadSummary:
    """The workload an estimate is for, in words a report can print."""

    model: str
    parameters: int  # number of parameter elements (not bytes)
    batch: str  # e.g. "32 x 512 tokens" or "64 x 3 x 224 x 224"
    mode: str  # "train" or "infer"
    precision: str
    optimizer: str
    # "selective": matrix products and attention kept; a fraction: that share of the blocks
    activation_checkpointing: bool | str | float
    allocator_config: str
    steps: int
    accumulation: int = 1  # micro-batches per optimizer step (batch is one micro-batch)
    offload: float = 0.0  # the share of the blocks offloaded (memfit.technique.offload)
    offload_checkpoints: bool = False  # the checkpointed blocks' inputs offloaded too
    strategy: str | None = None  # data-parallel strategy of a rank's estimate ("ddp")
    world_size: int = 1
    offload_shards: bool = False  # FSDP2's shards on the host (its CPU offload policy)
    batch_held: bool = False  # the caller holds the whole batch on the GPU through the step
    # memfit.technique's techniques the step uses, by name: a number or flag as given, else words
    techniques: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Timeline:
    """Memory after each allocator event; ``phases`` gives (name, first event index)."""

    allocated: list[int]
    reserved: list[int]
    phases: list[tuple[str, int]]

    def __repr__(self) -> str:
        """Short: the series hold one value per allocator event (often 100,000s)."""
        return f"Timeline({len(self.allocated)} events, {len(self.phases)} phases)"

    def phase_at(self, index: int) -> str:
        name = ""
        for phase, start in self.phases:
            if start > index:
                break
            name = phase
        return name


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether the estimate fits a GPU, and by how much (negative headroom: short by)."""

    gpu: GPU
    needed: int  # peak reserved (or, tight, the least it runs in) + non-PyTorch memory
    headroom: int
    # fits only because the caching allocator frees its cache and retries when the GPU is
    # full (slower steps); ``alloc_retries`` says how often over the steps, where known
    tight: bool = False
    alloc_retries: int | None = None

    @property
    def fits(self) -> bool:
        return self.headroom >= 0


@dataclass(frozen=True)
class Estimate:
    """The predicted memory of one workload. Sizes are int bytes."""

    workload: WorkloadSummary
    peak_allocated: int  # predicts torch.cuda.max_memory_allocated()
    peak_reserved: int  # predicts torch.cuda.max_memory_reserved()
    non_pytorch: int  # CUDA context and libraries, outside the caching allocator
    by_category: dict[Category, int]  # live bytes at the allocated peak
    by_module: list[tuple[str, int]]  # live bytes at the allocated peak, largest first
    peak_op: str
    peak_module: str
    peak_phase: str
    timeline: Timeline
    gpu: GPU | None = None
    notes: list[str] = field(default_factory=list)
    trace_seconds: float = 0.0
    # the least reserved memory the step runs in (the allocator frees its cache under
    # pressure, see memfit.estimator._pressure); None where not asked for (it costs a few replays)
    least_capacity: int | None = None
    # times the allocator frees its cache and retries over the steps when held to the
    # capacity the estimate was asked about (None: not asked, or it does not run there)
    alloc_retries: int | None = None
    # the GPU whose kernels the trace assumed (its name): ``gpu`` when one was given, else the
    # default that the estimate traces for; "" in estimates made before this field existed
    traced_for: str = ""
    # the library versions the estimate ran with (memory depends on them: say which);
    # all None in estimates made before this field existed
    versions: Versions = field(default_factory=Versions)
    # every rank's peaks in a data-parallel job (``world_size`` > 1), in rank order; the peaks
    # above are the largest rank's, ``peak_rank``
    ranks: tuple[RankPeak, ...] = ()
    peak_rank: int = 0
    # host memory the step needs besides the GPU's: a rank's offloaded FSDP2 shards and
    # optimizer states (``offload_shards``); 0 where nothing waits there
    host_memory: int = 0
    # the batch sizes whose traces this estimate's events were derived from by a batch model
    # (``memfit.trace.BatchModel``: the allocator replayed, nothing traced at this batch); ()
    # where its own batch was traced, as every estimate memfit returns is
    replayed_from: tuple[int, ...] = ()

    @property
    def total(self) -> int:
        """What nvidia-smi would show for the process at the peak."""
        return self.peak_reserved + self.non_pytorch

    def fits(self, gpu: GPU | str | int | None = None) -> Verdict:
        """Compare the peak (reserved plus non-PyTorch memory) with a GPU's memory. A step
        whose free-running peak does not fit may still run, slower, because the caching
        allocator frees its cache and retries when the GPU is full: where the estimate knows
        the least it runs in (estimated with ``gpu=``), the verdict says so (``tight``)."""
        target = resolve_gpu(gpu) if gpu is not None else self.gpu
        if target is None:
            raise InvalidInputError(
                "This estimate has no target GPU: pass one, e.g. estimate.fits('h100') or "
                "estimate.fits('24GiB'), or estimate with gpu=..."
            )
        free_running = Verdict(target, self.total, target.total - self.total)
        if free_running.fits or self.least_capacity is None:
            return free_running
        needed = self.least_capacity + self.non_pytorch
        if needed > target.total:
            return Verdict(target, needed, target.total - needed)
        # the retries were counted at the estimate's own GPU; another GPU's are not known
        retries = self.alloc_retries if self.gpu is not None and target == self.gpu else None
        return Verdict(target, needed, target.total - needed, tight=True, alloc_retries=retries)

    def __repr__(self) -> str:
        """One line: the model, the peaks in bytes and GiB, the GPU and verdict; the timeline
        only as its length (``estimate.timeline`` holds it)."""
        fields = [
            f"model={self.workload.model!r}",
            *(
                f"{name}={value} ({value / GiB:.2f} GiB)"
                for name, value in (
                    ("peak_allocated", self.peak_allocated),
                    ("peak_reserved", self.peak_reserved),
                    ("total", self.total),
                )
            ),
        ]
        if self.gpu is not None:
            verdict = self.fits()
            fields += [f"gpu={self.gpu.name!r}", f"fits={verdict.fits}"]
        fields.append(f"timeline={self.timeline!r}")
        return f"Estimate({', '.join(fields)})"

    def _repr_html_(self) -> str | None:
        """The full report as HTML where a notebook shows the estimate (``memfit.report``
        renders it: the verdict, the sizes, the timeline chart, the breakdown, the notes)."""
        return html_repr("estimate", self)

    def __str__(self) -> str:
        """A few readable lines; ``memfit.report`` renders the full report."""
        w = self.workload
        lines = [
            f"{w.model}: {w.mode}, batch {w.batch}, {w.precision}"
            + (f", {w.optimizer}" if w.mode == "train" else ""),
            f"  peak allocated {format_bytes(self.peak_allocated)}, "
            f"peak reserved {format_bytes(self.peak_reserved)}, "
            f"total {format_bytes(self.total)} with {format_bytes(self.non_pytorch)} "
            "outside PyTorch",
            f"  peak at {self.peak_op or '?'} in {self.peak_module or '?'} "
            f"({self.peak_phase or '?'})",
        ]
        if self.gpu is not None:
            verdict = self.fits()
            if verdict.fits:
                how = " by freeing the allocator's cache" if verdict.tight else ""
                state = f"fits{how}, {format_bytes(verdict.headroom)} to spare"
            else:
                state = f"does not fit, short by {format_bytes(-verdict.headroom)}"
            lines.append(f"  {self.gpu.name} ({format_bytes(self.gpu.total)}): {state}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        verdict = self.fits() if self.gpu is not None else None
        return {
            "workload": {
                "model": self.workload.model,
                "parameters": self.workload.parameters,
                "batch": self.workload.batch,
                "mode": self.workload.mode,
                "precision": self.workload.precision,
                "optimizer": self.workload.optimizer,
                "activation_checkpointing": self.workload.activation_checkpointing,
                "allocator_config": self.workload.allocator_config,
                "steps": self.workload.steps,
                "accumulation": self.workload.accumulation,
                "offload": self.workload.offload,
                "offload_checkpoints": self.workload.offload_checkpoints,
                "strategy": self.workload.strategy,
                "world_size": self.workload.world_size,
                "offload_shards": self.workload.offload_shards,
                "batch_held": self.workload.batch_held,
                **({"techniques": self.workload.techniques} if self.workload.techniques else {}),
            },
            "versions": self.versions.to_dict(),
            "units": "bytes",
            "peak_allocated": self.peak_allocated,
            "peak_reserved": self.peak_reserved,
            "non_pytorch": self.non_pytorch,
            "total": self.total,
            "by_category": {c.value: n for c, n in self.by_category.items()},
            "by_module": [{"module": m, "bytes": n} for m, n in self.by_module],
            "peak": {"op": self.peak_op, "module": self.peak_module, "phase": self.peak_phase},
            "gpu": None
            if verdict is None
            else {
                "name": verdict.gpu.name,
                "total": verdict.gpu.total,
                "fits": verdict.fits,
                "headroom": verdict.headroom,
                "tight": verdict.tight,
            },
            "notes": list(self.notes),
            "traced_for": self.traced_for,
            "trace_seconds": round(self.trace_seconds, 3),
            "least_capacity": self.least_capacity,
            "alloc_retries": self.alloc_retries,
            "peak_rank": self.peak_rank,
            "host_memory": self.host_memory,
            **({"replayed_from": list(self.replayed_from)} if self.replayed_from else {}),
            "ranks": [
                {
                    "rank": r.rank,
                    "peak_allocated": r.peak_allocated,
                    "peak_reserved": r.peak_reserved,
                    "traced": r.traced,
                    "like": r.like,
                }
                for r in self.ranks
            ],
        }

    def to_json(self, *, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)
