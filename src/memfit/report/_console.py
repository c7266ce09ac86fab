"""Render an estimate in the terminal with rich.

Details come first (what the peak is made of, by category and by module, and where it
happens) and the conclusion last (the headline sizes and the fit verdict), because the last
lines are the ones left on screen when the output scrolls. Every user-supplied string goes
through :class:`rich.text.Text`, never markup, so a module called ``[bold]`` prints as written.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from memfit._units import format_bytes
from memfit.estimator import Estimate
from memfit.report._fit import box_width, bullets
from memfit.report._text import (
    MEMORY_ROWS,
    UNITS_CAPTION,
    category_rows,
    format_share,
    memory_values,
    module_rows,
    peak_fields,
    shorten_middle,
    stated_fields,
    verdict_text,
    workload_settings,
    workload_title,
)

__all__ = ["render_estimate"]

_BAR_WIDTH = 20
_EIGHTHS = " ▏▎▍▌▋▊▉"
_MODULE_ROWS = 10
_MODULE_WIDTH = 60
_MODULE_LEAST = 20  # a module's name is cut to no fewer cells than this


def _bar(share: float, width: int = _BAR_WIDTH) -> str:
    """A horizontal bar of ``share`` (0..1) of ``width`` cells, in eighths of a cell."""
    eighths = round(max(0.0, min(1.0, share)) * width * 8)
    full, part = divmod(eighths, 8)
    return "█" * full + (_EIGHTHS[part] if part else "")


def _header(estimate: Estimate) -> Text:
    """Two lines: what model and batch, then how it runs (mode, precision, optimizer...)."""
    text = Text()
    text.append("memfit estimate  ", style="bold")
    text.append(workload_title(estimate.workload), style="bold cyan")
    text.append("\n")
    settings = stated_fields(estimate, workload_settings(estimate.workload))
    for i, (label, value) in enumerate(settings):
        if i:
            text.append(" · ", style="dim")
        text.append(f"{label} ", style="dim")
        text.append(value)
    return text


def _peak(estimate: Estimate) -> Text:
    text = Text("Peak at ", style="bold")
    for i, (label, value) in enumerate(peak_fields(estimate)):
        if i:
            text.append(" · ", style="dim")
        text.append(f"{label} ", style="dim")
        text.append(value, style="bold")
    return text


def _memory_table(estimate: Estimate) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_column(style="dim")
    for (label, meaning), value in zip(MEMORY_ROWS, memory_values(estimate), strict=True):
        table.add_row(Text(label), Text(format_bytes(value)), Text(meaning))
    return table


def _category_table(estimate: Estimate) -> Table:
    rows, total = category_rows(estimate)
    table = Table(title="At the peak", caption=UNITS_CAPTION, title_justify="left")
    table.add_column("category")
    table.add_column("size", justify="right")
    table.add_column("share", justify="right")
    table.add_column("", no_wrap=True, style="cyan", min_width=_BAR_WIDTH)
    for row in rows:
        table.add_row(
            Text(row.label), format_bytes(row.size), f"{100 * row.share:.1f}%", _bar(row.share)
        )
    table.add_section()
    table.add_row(Text("live at the peak", style="bold"), format_bytes(total), "", "")
    return table


def _module_table(estimate: Estimate, width: int) -> Table | None:
    """The largest modules at the peak, their names cut in the middle to fit ``width``."""
    modules = module_rows(estimate, _MODULE_ROWS)
    if not modules.rows:
        return None
    table = Table(title="Top modules at the peak", title_justify="left")
    table.add_column("module", no_wrap=True)
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("of peak allocated", justify="right")
    # what the sizes and the share (its header on two lines) leave the names
    sizes = [size for _, size in modules.rows] + [modules.rest_size]
    others = box_width([0, max(len(format_bytes(size)) for size in sizes), len("allocated")])
    room = max(_MODULE_LEAST, min(_MODULE_WIDTH, width - others))
    for name, size in modules.rows:
        label = shorten_middle(name, room) if name else "(top level)"
        table.add_row(Text(label), format_bytes(size), format_share(size, estimate.peak_allocated))
    if modules.rest_count:
        table.add_row(
            Text(f"… {modules.rest_count} more", style="dim"),
            Text(format_bytes(modules.rest_size), style="dim"),
            Text(format_share(modules.rest_size, estimate.peak_allocated), style="dim"),
        )
    return table


def _verdict(estimate: Estimate) -> Text | None:
    verdict = verdict_text(estimate)
    if verdict is None:
        return None
    style = "bold yellow" if verdict.tight else "bold green" if verdict.fits else "bold red"
    return Text.assemble(("Verdict: ", "bold"), (verdict.text, style))


def notes_text(notes: Sequence[str]) -> Group | None:
    """The "Notes" list of a report (an estimate's, a snapshot's), each note's wrapped lines
    indented under it; None when there are none."""
    if not notes:
        return None
    return Group(Text("Notes", style="bold"), bullets(notes))


def render_estimate(estimate: Estimate, console: Console | None = None) -> None:
    """Print ``estimate`` to ``console`` (a new stdout console when ``None``).

    Shows the workload, the breakdown by category and by module at the allocated peak, where
    the peak happens, the headline sizes and what each predicts, the fit verdict when the
    estimate has a GPU, and the estimate's notes. Sizes use binary units throughout.
    """
    out = console if console is not None else Console()
    parts: list[RenderableType] = [_header(estimate), Text(), _category_table(estimate)]
    modules = _module_table(estimate, out.width)
    if modules is not None:
        parts += [Text(), modules]
    parts += [Text(), _peak(estimate)]
    parts += [Text(), _memory_table(estimate)]
    verdict = _verdict(estimate)
    if verdict is not None:
        parts += [Text(), verdict]
    notes = notes_text(estimate.notes)
    if notes is not None:
        parts += [Text(), notes]
    out.print(Group(*parts))
