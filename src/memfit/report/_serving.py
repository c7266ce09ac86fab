"""The answer of ``memfit serve``: how many sequences fit at a context (or how long a context at
a concurrency), where the memory goes, and the largest concurrency at each context asked."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from memfit._units import format_bytes

if TYPE_CHECKING:
    from memfit.estimator import ServingCapacity

__all__ = ["render_serving"]


def render_serving(result: ServingCapacity, console: Console) -> None:
    """The answer in a sentence, the memory of the point it rests on, the table, the notes."""
    gpu = f"{result.gpu.name} ({format_bytes(result.gpu.total)})"
    best = result.best
    if best is None:
        console.print(
            f"{result.model} does not fit one sequence of {result.context or 'any'} tokens on "
            f"{gpu} in {result.precision}.",
            style="bold red",
        )
    else:
        console.print(
            f"[bold]{result.concurrency}[/bold] sequences of [bold]{result.context}[/bold] "
            f"tokens ({result.new_tokens} generated) fit on {gpu}: {result.model} in "
            f"{result.precision}, {result.cache} cache."
        )
        one_more = next(
            (
                p
                for p in result.points
                if p.context == best.context and p.concurrency == best.concurrency + 1
            ),
            None,
        )
        memory = Table(show_header=False, box=None)
        memory.add_column(justify="left")
        memory.add_column(justify="right")
        memory.add_row("weights", format_bytes(result.weights))
        memory.add_row(
            "KV cache, one sequence",
            format_bytes(result.kv_cache_per_sequence),
        )
        memory.add_row(
            f"KV cache, {result.concurrency} sequences",
            format_bytes(result.kv_cache_per_sequence * result.concurrency),
        )
        memory.add_row("peak reserved", format_bytes(best.peak_reserved))
        memory.add_row("with the CUDA context", format_bytes(best.needed))
        if one_more is not None:
            memory.add_row(
                f"{one_more.concurrency} sequences would need",
                "more than any GPU" if one_more.refused else format_bytes(one_more.needed),
            )
        console.print(memory)
    if result.table:
        table = Table(title="largest concurrency by context")
        for column in ("context", "sequences", "peak reserved", "needed"):
            table.add_column(column, justify="right")
        for p in result.table:
            table.add_row(
                str(p.context),
                str(p.concurrency),
                format_bytes(p.peak_reserved),
                format_bytes(p.needed),
            )
        console.print(table)
    console.print(f"{len(result.points)} generate calls traced.", style="dim")
    notes = Table(show_header=False, box=None, padding=(0, 1, 0, 0))
    notes.add_column(width=3, justify="right")
    notes.add_column()
    for note in result.notes:
        notes.add_row("•", note, style="dim")
    console.print(notes)
