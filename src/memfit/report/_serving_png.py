"""Draw a serving capacity (:class:`memfit.estimator.ServingCapacity`) as a PNG: the largest
number of sequences that fit against their context, as traced, beside what the KV cache alone
would allow.

Context runs along x and concurrency up y, both on a log-2 scale (contexts and concurrencies
double). The traced line is each context's largest concurrency that fits, from ``generate``
traced with its activations and the allocator; the dashed line is the GPU's memory, less the
weights and the CUDA context, divided by one sequence's KV cache from the config: the bound a
KV-cache calculator gives, which a real ``generate`` never reaches. The answer is a star.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from memfit._units import format_bytes
from memfit.report._chart import ALLOCATED_COLOR, CAPACITY_COLOR
from memfit.report._figure import new_axes
from memfit.report._paths import PathLike, output_path

if TYPE_CHECKING:
    from memfit.estimator import ServingCapacity

__all__ = ["write_serving_png"]

_ANSWER_COLOR = "#2e7d32"


def _traced(result: ServingCapacity) -> list[tuple[int, int]]:
    """(context, largest concurrency) of the table and the answer, by context."""
    points = {p.context: p.concurrency for p in result.table}
    if result.best is not None:
        points[result.best.context] = result.best.concurrency
    return sorted(points.items())


def _kv_bound(result: ServingCapacity) -> list[tuple[int, int]]:
    """(context, sequences whose KV cache alone fills what the weights leave), by context."""
    room = result.gpu.total - result.weights - result.outside_pytorch
    return [
        (context, room // kv)
        for context, kv in sorted(result.kv_cache_by_context.items())
        if kv > 0 and room > 0
    ]


def _title(result: ServingCapacity) -> str:
    head = (
        f"{result.model} on {result.gpu.name} ({format_bytes(result.gpu.total)}), "
        f"{result.weights_words}, {result.cache} cache, {result.new_tokens} new tokens"
    )
    if result.best is None:
        return f"{head}\nnot one sequence of {result.context} tokens fits"
    return f"{head}\n{result.concurrency} sequences of {result.context} tokens fit"


def write_serving_png(result: ServingCapacity, path: PathLike) -> Path:
    """Write ``result``'s concurrency against context to ``path`` (a PNG); return the path
    written."""
    target = output_path(path, "serving plot", ".png")
    fig, ax = new_axes(8.0, 5.0, 130)
    traced = _traced(result)
    if traced:
        ax.plot(
            *zip(*traced, strict=True),
            marker="o",
            color=ALLOCATED_COLOR,
            linewidth=1.6,
            zorder=3,
            label="largest that fits, generate traced",
        )
    bound = _kv_bound(result)
    if bound:
        ax.plot(
            *zip(*bound, strict=True),
            linestyle="--",
            color=CAPACITY_COLOR,
            linewidth=1.2,
            zorder=2,
            label="KV cache alone in what the weights leave",
        )
    if result.best is not None:
        _star(ax, result.best.context, result.best.concurrency)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("context, tokens a sequence (prompt and generated)")
    ax.set_ylabel("sequences at once")
    ax.set_title(_title(result), fontsize=10.5)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper right")
    fig.savefig(target, format="png")
    return target


def _star(ax: Any, context: int, concurrency: int) -> None:
    ax.scatter([context], [concurrency], s=140, marker="*", color=_ANSWER_COLOR, zorder=5)
    ax.annotate(
        f"{concurrency} x {context}",
        (context, concurrency),
        textcoords="offset points",
        xytext=(8, 8),
        fontsize=8.5,
        color=_ANSWER_COLOR,
    )
