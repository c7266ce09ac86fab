"""The answer of ``memfit serve``: how many sequences fit at a context (or how long a context at
a concurrency), where the memory goes, and the largest concurrency at each context asked."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from memfit._units import format_bytes

if TYPE_CHECKING:
    from memfit.estimator import ServingCapacity, ServingPoint

__all__ = ["render_serving"]


def _one_more(result: ServingCapacity) -> ServingPoint | None:
    """The point of one sequence more than the answer (or of one, where none fits)."""
    context = result.best.context if result.best is not None else result.context
    wanted = result.concurrency + 1 if result.best is not None else 1
    return next(
        (p for p in result.points if p.context == context and p.concurrency == wanted), None
    )


def render_serving(result: ServingCapacity, console: Console) -> None:
    """The answer in a sentence, the memory of the point it rests on, the table, the notes."""
    gpu = f"{result.gpu.name} ({format_bytes(result.gpu.total)})"
    best = result.best
    if best is None:
        console.print(
            f"{result.model} does not fit one sequence of {result.context or 'any'} tokens on "
            f"{gpu} in {result.weights_words}.",
            style="bold red",
        )
    else:
        console.print(
            f"[bold]{result.concurrency}[/bold] sequence{'s' * (result.concurrency != 1)} of "
            f"[bold]{result.context}[/bold] tokens ({result.new_tokens} generated) fit on "
            f"{gpu}: {result.model} in {result.weights_words}, {result.cache} cache."
        )
    memory = Table(show_header=False, box=None)
    memory.add_column(justify="left")
    memory.add_column(justify="right")
    memory.add_row("weights", format_bytes(result.weights))
    memory.add_row("KV cache, one sequence", format_bytes(result.kv_cache_per_sequence))
    if best is not None:
        memory.add_row(
            f"KV cache, {result.concurrency} sequence{'s' * (result.concurrency != 1)}",
            format_bytes(result.kv_cache_per_sequence * result.concurrency),
        )
        memory.add_row("peak reserved", format_bytes(best.peak_reserved))
        memory.add_row("with the CUDA context", format_bytes(best.needed))
    over = _one_more(result)
    if over is not None:
        memory.add_row(
            f"{over.concurrency} sequence{'s' * (over.concurrency != 1)} would need",
            "more than any GPU" if over.refused else format_bytes(over.needed),
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
