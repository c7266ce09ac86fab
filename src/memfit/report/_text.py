"""The words every report shares, so the terminal, the HTML page and the plots say the same thing.

Each renderer (rich, HTML, PNG, SVG) draws these strings its own way; none of them invents
wording of its own. Sizes are always formatted with binary units (``GiB = 2^30 bytes``).
"""

from __future__ import annotations

from dataclasses import dataclass

from memfit._events import Category
from memfit._units import format_bytes
from memfit.estimator import Estimate, Versions, WorkloadSummary

__all__ = [
    "MEMORY_ROWS",
    "UNITS_CAPTION",
    "CategoryRow",
    "ModuleRows",
    "VerdictText",
    "category_rows",
    "format_count",
    "format_share",
    "memory_values",
    "module_rows",
    "peak_fields",
    "shorten_middle",
    "stated_fields",
    "verdict_text",
    "version_fields",
    "workload_fields",
    "workload_settings",
    "workload_title",
]

UNITS_CAPTION = "GiB = 2^30 bytes, MiB = 2^20 bytes"

# (label, what the figure predicts); the values come from memory_values(), in the same order.
MEMORY_ROWS: tuple[tuple[str, str], ...] = (
    ("peak allocated", "predicts torch.cuda.max_memory_allocated()"),
    ("peak reserved", "predicts torch.cuda.max_memory_reserved()"),
    ("non-PyTorch", "CUDA context and libraries, outside the caching allocator"),
    ("total", "as nvidia-smi would show for the process at the peak"),
)


def memory_values(estimate: Estimate) -> tuple[int, int, int, int]:
    """The four headline sizes, in the order of :data:`MEMORY_ROWS`."""
    return (estimate.peak_allocated, estimate.peak_reserved, estimate.non_pytorch, estimate.total)


def format_count(n: int) -> str:
    """A parameter count in words people use: ``124.4M``, ``6.74B``, ``850K``."""
    if n >= 1_000_000_000:
        return f"{n / 1e9:.2f}B"
    if n >= 1_000_000:
        return f"{n / 1e6:.1f}M"
    if n >= 1_000:
        return f"{n / 1e3:.1f}K"
    return str(n)


def format_share(part: int, whole: int) -> str:
    """``part`` as a percentage of ``whole`` with one decimal; ``-`` when ``whole`` is zero."""
    if whole <= 0:
        return "-"
    return f"{100.0 * part / whole:.1f}%"


def shorten_middle(text: str, width: int) -> str:
    """Cut the middle out of a long string (module paths), keeping both ends readable.

    The start of a module path says where in the model it is and the end says which layer it
    is, so both ends matter more than the repeated middle.
    """
    if width < 5:
        raise ValueError(f"width must be at least 5, got {width}")
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    tail = width - 1 - head
    return f"{text[:head]}…{text[-tail:]}"


def workload_title(workload: WorkloadSummary) -> str:
    """One short line naming the workload: ``gpt2 · 124.4M parameters · batch 8 x 1024 tokens``."""
    batch = "micro-batch" if workload.accumulation > 1 else "batch"
    return (
        f"{workload.model} · {format_count(workload.parameters)} parameters · "
        f"{batch} {workload.batch}"
    )


def workload_settings(workload: WorkloadSummary) -> list[tuple[str, str]]:
    """How the workload runs, as (label, value), after what :func:`workload_title` says."""
    return workload_fields(workload)[3:]


def workload_fields(workload: WorkloadSummary) -> list[tuple[str, str]]:
    """The workload as (label, value) pairs, in the order a header shows them."""
    steps = f"{workload.steps} step" + ("" if workload.steps == 1 else "s")
    batch = [("batch", workload.batch)]
    if workload.accumulation > 1:
        batch = [
            ("micro-batch", workload.batch),
            ("accumulation", f"{workload.accumulation} micro-batches a step"),
        ]
    return [
        ("model", workload.model),
        ("parameters", format_count(workload.parameters)),
        *batch,
        *([("batch held", "by the caller, through the step")] if workload.batch_held else []),
        ("mode", workload.mode),
        ("precision", workload.precision),
        ("optimizer", workload.optimizer or "none"),
        ("checkpointing", _checkpointing(workload.activation_checkpointing)),
        *(
            [("offload", _offload(workload))]
            if workload.offload or workload.offload_checkpoints
            else []
        ),
        *([("parallel", _parallel(workload))] if workload.strategy else []),
        ("allocator", workload.allocator_config or "default"),
        ("traced", steps),
    ]


def _parallel(workload: WorkloadSummary) -> str:
    text = f"{str(workload.strategy).upper()}, rank of {workload.world_size}"
    return text + (", shards on the host (CPU offload)" if workload.offload_shards else "")


def _offload(workload: WorkloadSummary) -> str:
    """What the offload takes to host memory, in words."""
    parts = []
    if workload.offload_checkpoints:
        parts.append("the checkpointed blocks' inputs")
    if workload.offload:
        rest = "not checkpointed" if workload.offload_checkpoints else ""
        parts.append(f"{workload.offload:.0%} of the blocks {rest}".rstrip())
    return " and ".join(parts)


def _checkpointing(setting: bool | str | float) -> str:
    if setting == "selective":
        return "selective (matrix products and attention kept)"
    if isinstance(setting, float):
        return f"{setting:.0%} of the blocks"
    return "on" if setting else "off"


def version_fields(versions: Versions) -> list[tuple[str, str]]:
    """The installed libraries' versions as (library, version); those not installed are left
    out (the JSON says null for them)."""
    return [(name, version) for name, version in versions.items() if version is not None]


def stated_fields(estimate: Estimate, fields: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``fields`` of ``estimate``'s workload as a header should state them: inference has no
    optimizer, so none is named; the library versions the estimate assumed follow (memory
    depends on them); without a target GPU, the GPU whose kernels were traced is named as an
    assumption."""
    if estimate.workload.mode == "infer":
        fields = [(label, value) for label, value in fields if label != "optimizer"]
    fields = [*fields, *version_fields(estimate.versions)]
    if estimate.gpu is None and estimate.traced_for:
        fields = [*fields, ("gpu", f"none given, traced as for {estimate.traced_for}")]
    return fields


@dataclass(frozen=True, slots=True)
class CategoryRow:
    """One line of the breakdown at the peak."""

    category: Category
    label: str
    size: int
    share: float  # fraction of the live bytes at the peak, 0..1


def category_rows(estimate: Estimate) -> tuple[list[CategoryRow], int]:
    """The categories live at the peak, largest first, and their sum.

    Empty categories are left out: a row of zeros says nothing. Ties keep the order of
    :class:`Category` so the output is stable.
    """
    order = {c: i for i, c in enumerate(Category)}
    items = [(c, n) for c, n in estimate.by_category.items() if n > 0]
    items.sort(key=lambda item: (-item[1], order.get(item[0], len(order))))
    total = sum(n for _, n in items)
    rows = [CategoryRow(c, c.label(), n, n / total if total else 0.0) for c, n in items]
    return rows, total


@dataclass(frozen=True, slots=True)
class ModuleRows:
    """The largest modules at the peak, and what the rest add up to."""

    rows: list[tuple[str, int]]
    rest_count: int
    rest_size: int


def module_rows(estimate: Estimate, limit: int = 10) -> ModuleRows:
    """The ``limit`` largest modules, and the count and sum of the others."""
    ranked = sorted(estimate.by_module, key=lambda item: -item[1])
    shown = ranked[:limit]
    rest = ranked[limit:]
    return ModuleRows(shown, len(rest), sum(n for _, n in rest))


def peak_fields(estimate: Estimate) -> list[tuple[str, str]]:
    """Where the allocated peak happens, as (label, value): the op, the module and the phase."""
    return [
        ("op", estimate.peak_op or "unknown"),
        ("module", estimate.peak_module or "(top level)"),
        ("phase", estimate.peak_phase or "unnamed"),
    ]


@dataclass(frozen=True, slots=True)
class VerdictText:
    """The fit verdict as a sentence, and whether it is good news."""

    text: str
    fits: bool
    tight: bool = False  # fits only by the allocator freeing its cache: slower steps


def verdict_text(estimate: Estimate) -> VerdictText | None:
    """``fits on H100 80GB with 12.3 GiB headroom``; ``None`` when no GPU was chosen."""
    if estimate.gpu is None:
        return None
    verdict = estimate.fits()
    amount = format_bytes(abs(verdict.headroom), precision=1)
    if verdict.tight:
        n = verdict.alloc_retries
        times = "" if n is None else " (once)" if n == 1 else f" ({n} times)"
        return VerdictText(
            f"fits on {verdict.gpu.name} only because the allocator frees its cache and "
            f"retries{times}, which slows the steps: it needs {format_bytes(verdict.needed)}, "
            f"{format_bytes(estimate.total)} with memory to spare",
            True,
            tight=True,
        )
    if verdict.fits:
        return VerdictText(f"fits on {verdict.gpu.name} with {amount} headroom", True)
    return VerdictText(f"does not fit on {verdict.gpu.name}: short by {amount}", False)
