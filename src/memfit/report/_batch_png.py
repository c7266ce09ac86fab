"""Draw a batch-size search as a PNG: memory against batch size, the budget, the answer.

Each estimate the search made is a point twice: what the step reserves with memory to spare,
and the least it runs in (the caching allocator frees its cache when the GPU is full); both
with the CUDA context, as the budget counts them. GPU trials are drawn where they measured.
The figure is made by ``_figure.new_axes`` (matplotlib, an optional extra; never pyplot).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from memfit._errors import InvalidInputError
from memfit._units import GiB, format_bytes
from memfit.report._chart import CAPACITY_COLOR, PEAK_COLOR, RESERVED_COLOR
from memfit.report._figure import new_axes
from memfit.report._paths import PathLike, output_path


class BatchSearch(Protocol):
    """What the plot reads of :class:`memfit.runtime.BatchSizeResult` (named by shape, so that
    drawing one does not import the runtime and torch): its estimates have ``batch_size``,
    ``peak_reserved``, ``context`` and ``total``; its trials ``batch_size``, ``outcome`` and
    ``peak_reserved``."""

    @property
    def batch_size(self) -> int: ...
    @property
    def confirmed(self) -> bool: ...
    @property
    def gpu(self) -> str: ...
    @property
    def gpu_total(self) -> int: ...
    @property
    def budget(self) -> int: ...
    @property
    def margin(self) -> int: ...
    @property
    def estimates(self) -> Sequence[Any]: ...
    @property
    def trials(self) -> Sequence[Any]: ...


__all__ = ["BatchSearch", "batch_size_plot_path", "write_batch_size_png"]

_TRIAL_COLORS = {"fits": "#2e7d32", "over budget": "#ef6c00", "out of memory": "#c62828"}


def batch_size_plot_path(path: PathLike) -> Path:
    """``path`` checked for a batch-size plot: a ``.png`` in an existing folder (check it
    before a search, which takes seconds)."""
    target = output_path(path, "batch-size plot", ".png")
    if target.suffix.lower() != ".png":
        raise InvalidInputError(
            f"The batch-size search is drawn as a PNG; '{target}' does not end in .png. "
            "Give a path such as 'batch-size.png'."
        )
    return target


def write_batch_size_png(result: BatchSearch, path: PathLike) -> None:
    """Write the search behind ``result`` to ``path`` (a ``.png``)."""
    target = batch_size_plot_path(path)
    fig, ax = new_axes(9.0, 5.0, 130)
    points = sorted(result.estimates, key=lambda p: p.batch_size)
    xs = [p.batch_size for p in points]
    spare = [(p.peak_reserved + p.context) / GiB for p in points]
    need = [p.total / GiB for p in points]
    ax.plot(xs, spare, "o-", color=RESERVED_COLOR, label="peak reserved + context")
    ax.plot(xs, need, "s--", color=PEAK_COLOR, label="runs in (cache freed when full) + context")
    ax.axhline(result.gpu_total / GiB, color=CAPACITY_COLOR, linewidth=1.2, label="GPU memory")
    ax.axhline(
        result.budget / GiB,
        color=CAPACITY_COLOR,
        linestyle=":",
        linewidth=1.2,
        label=f"budget (margin {format_bytes(result.margin)})",
    )
    ax.axvline(result.batch_size, color="#555555", linewidth=0.9)
    ax.annotate(
        f"batch {result.batch_size}",
        (result.batch_size, result.budget / GiB),
        textcoords="offset points",
        xytext=(-6, -14),
        ha="right",
        fontsize=9,
    )
    for outcome, color in _TRIAL_COLORS.items():
        tried = [t for t in result.trials if t.outcome == outcome]
        if tried:
            context = points[0].context if points else 0
            ax.scatter(
                [t.batch_size for t in tried],
                [(t.peak_reserved + context) / GiB for t in tried],
                marker="X",
                s=70,
                color=color,
                zorder=5,
                label=f"GPU trial: {outcome} (measured)",
            )
    ax.set_xlabel("batch size")
    ax.set_ylabel("GiB (2^30 bytes)")
    how = "confirmed on the GPU" if result.confirmed else "estimated"
    ax.set_title(f"Largest batch: {result.batch_size} ({how}) on {result.gpu}", fontsize=11)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.savefig(target, format="png")
