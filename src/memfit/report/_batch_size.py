"""Print a batch-size search in the terminal (``memfit estimate --max-batch-size``).

A table of the batch sizes the search estimated, what each reserves and the least it runs
in, then the GPU trials, and the answer last with the budget it was held to. The PNG of the
same search is :mod:`memfit.report._batch_png`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from memfit._units import format_bytes

if TYPE_CHECKING:  # the runtime imports torch; printing a result needs only its fields
    from memfit.runtime import BatchSizeResult

__all__ = ["render_batch_size"]


def _estimates_table(result: BatchSizeResult, model: str) -> Table:
    table = Table(title=f"{model}: batch sizes estimated on {result.gpu}")
    for col in ("batch size", "peak reserved", "runs in", "with CUDA context", "fits"):
        table.add_column(col, justify="right")
    for p in result.estimates:
        fits = "yes" if p.total <= result.budget else "no"
        table.add_row(
            str(p.batch_size),
            format_bytes(p.peak_reserved),
            format_bytes(p.need),
            format_bytes(p.total),
            fits,
        )
    return table


def render_batch_size(result: BatchSizeResult, model: str, console: Console | None = None) -> None:
    """Print ``result``, the search for ``model``'s largest batch, to ``console`` (a new
    stdout console when ``None``)."""
    out = console if console is not None else Console()
    out.print(_estimates_table(result, model))
    out.print(
        "peak reserved: with memory to spare; runs in: the least the step needs, as the "
        "caching allocator frees its cache and retries when the GPU is full",
        style="dim",
        highlight=False,
    )
    for t in result.trials:
        out.print(
            f"GPU trial at batch {t.batch_size}: {t.outcome}, measured peak reserved "
            f"{format_bytes(t.peak_reserved)} (predicted {format_bytes(t.predicted_reserved)}), "
            f"{t.seconds:.1f} s",
            highlight=False,
        )
    limit = " (the max_batch limit)" if result.limited_by == "max_batch" else ""
    how = f", confirmed in {len(result.trials)} GPU trial(s)" if result.confirmed else ""
    replayed = len(set(result.replayed) - set(result.traced))
    made = f" ({replayed} replayed from a batch model)" if replayed else ""
    out.print(
        f"Largest batch size: [bold]{result.batch_size}[/]{limit}{how} · budget "
        f"{format_bytes(result.budget)} = {format_bytes(result.gpu_total)} less a margin of "
        f"{format_bytes(result.margin)} · {len(result.estimates)} estimates{made} in "
        f"{result.estimate_seconds:.1f} s · about {format_bytes(result.per_sample)} a sample",
        highlight=False,
    )
    if result.batch_model:
        out.print(f"Batch model: {result.batch_model}", style="dim", highlight=False)
    note = result.pressure_note()
    if note:
        out.print(f"Note: batch {result.batch_size} {note}.", style="yellow", highlight=False)
