"""Print a plan (:class:`memfit.planner.Plan`) in the terminal with rich: ``memfit plan``.

The answer comes first, in words: what to change against the user's configuration (or, when
nothing fits, the smallest configuration, how far over it is and what would fit). Then the
ranked table of candidates, the chosen row marked, a line where the budget cuts the table, and
under it the notes and where the step times come from. Text from the plan goes through
:class:`rich.text.Text`, never markup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from memfit.report._console import notes_text
from memfit.report._fit import bullets, tight_table
from memfit.report._plan_layout import PlanLayout, layout_cells, plan_layout
from memfit.report._plan_text import (
    TOKENS_COLUMN,
    PlanRow,
    chosen_lines,
    needs_caption,
    nothing_fits_lines,
    plan_footer,
    plan_rows,
    plan_title,
    shown_rows,
    tags_legend,
)

if TYPE_CHECKING:
    from memfit.planner import Plan

__all__ = ["plan_renderable", "render_plan"]

_WIDE = 160  # the width plan_renderable lays the table out for when not told


def _lines(head: str, items: list[str], label: str, style: str) -> Group:
    return Group(Text(head, style=style), Text(label), bullets(items))


def _answer(plan: Plan) -> Group:
    if plan.chosen is None:
        head, would = nothing_fits_lines(plan)
        return _lines(head, would, "What would fit:", "bold red")
    head, changes = chosen_lines(plan)
    return _lines(head, changes, "What changes against your configuration:", "bold green")


def _table(plan: Plan, rows: list[PlanRow], layout: PlanLayout) -> Table:
    """The ranked table of ``rows`` in ``layout``: its columns at their widths."""
    cells = layout_cells(plan, rows, layout.tags)
    table = tight_table(
        title=plan_title(plan),
        title_justify="left",
        caption=needs_caption(plan, rows) + ("; ▶ the chosen plan" if plan.fits else ""),
        caption_justify="left",
    )
    for (header, numeric), width in zip(layout.columns, layout.widths, strict=True):
        table.add_column(header, justify="right" if numeric else "left", width=width)
    budget_drawn = False
    for row, cell in zip(rows, cells[:-1], strict=True):
        if not row.evaluated.fits and not budget_drawn:
            table.add_section()
            table.add_row(*(cells[-1][h] for h, _ in layout.columns), style="bold red")
            table.add_section()
            budget_drawn = True
        style = "bold green" if row.chosen else "" if row.evaluated.fits else "dim"
        table.add_row(*(Text(cell[h]) for h, _ in layout.columns), style=style)
    return table


def _dropped_note(plan: Plan, layout: PlanLayout) -> str:
    """What the columns the layout leaves out hold, and how to see them."""
    held = {
        TOKENS_COLUMN: f"tokens/s (samples/s x {plan.seq_len} tokens)",
        "bound": "bound (what a step waits on: the GPU or the host)",
    }
    what = " and ".join(held[h] for h in layout.dropped)
    return (
        f"Left out at this width: {what}; a terminal of {layout.wider} columns or --json "
        "shows them."
    )


def plan_renderable(plan: Plan, *, show_all: bool = False, width: int = _WIDE) -> RenderableType:
    """``plan`` as one rich renderable (what :func:`render_plan` prints): the answer in
    words, the ranked table (at most 15 rows unless ``show_all``; the settings in one column
    when a column each would not fit ``width``), then the notes."""
    rows = shown_rows(plan_rows(plan), show_all)
    layout = plan_layout(plan, rows, width)
    parts: list[RenderableType] = [_answer(plan), Text(), _table(plan, rows, layout)]
    footer = plan_footer(plan, len(rows), any(not r.evaluated.fits for r in rows))
    if layout.tags:
        footer.insert(0, tags_legend([r.evaluated.candidate for r in rows]))
    if layout.dropped:
        footer.insert(0, _dropped_note(plan, layout))
    parts.append(Text("\n".join(footer), style="dim"))
    notes = notes_text(plan.notes)
    if notes is not None:
        parts += [Text(), notes]
    return Group(*parts)


def render_plan(plan: Plan, console: Console | None = None, *, show_all: bool = False) -> None:
    """Print ``plan`` to ``console`` (a new stdout console when ``None``); ``show_all`` shows
    every candidate instead of the first 15."""
    out = console if console is not None else Console()
    out.print(plan_renderable(plan, show_all=show_all, width=out.width))
