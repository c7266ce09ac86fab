"""Print a plan (:class:`memfit.planner.Plan`) in the terminal with rich: ``memfit plan``.

The answer comes first, in words: what to change against the user's configuration (or, when
nothing fits, the smallest configuration, how far over it is and what would fit). Then the
ranked table of candidates, the chosen row marked, a line where the budget cuts the table, and
under it the notes and where the step times come from. Text from the plan goes through
:class:`rich.text.Text`, never markup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from memfit.report._console import notes_text
from memfit.report._plan_text import (
    PLAN_COLUMNS,
    SETTINGS_COLUMN,
    PlanRow,
    budget_cells,
    candidate_cells,
    chosen_lines,
    compact_columns,
    needs_caption,
    nothing_fits_lines,
    plan_columns,
    plan_footer,
    plan_rows,
    plan_title,
    shown_rows,
)

if TYPE_CHECKING:
    from memfit.planner import Plan

__all__ = ["plan_renderable", "render_plan"]

_NARROW_DROPS = ("tokens/s", "bound")  # left out when the table is still too wide
_WIDE = 160  # the width plan_renderable lays the table out for when not told


def _lines(head: str, items: list[str], label: str, style: str) -> Text:
    text = Text()
    text.append(head, style=style)
    text.append(f"\n{label}")
    for item in items:
        text.append("\n  • ")
        text.append(item)
    return text


def _answer(plan: Plan) -> Text:
    if plan.chosen is None:
        head, would = nothing_fits_lines(plan)
        return _lines(head, would, "What would fit:", "bold red")
    head, changes = chosen_lines(plan)
    return _lines(head, changes, "What changes against your configuration:", "bold green")


def _words(header: str, cells: list[dict[str, str]]) -> list[str]:
    """What must not be cut in ``header``'s column: its cells, or the settings' words."""
    if header == SETTINGS_COLUMN:
        return [w for c in cells for w in c[header].split()]
    return [c[header] for c in cells]


def _width(columns: list[tuple[str, bool]], cells: list[dict[str, str]]) -> int:
    """How wide the table is at the least: each column's widest text (a word of the settings
    or of the header) and its padding, the separators and the edges."""
    inner = sum(max(map(len, h.split() + _words(h, cells))) + 2 for h, _ in columns)
    return inner + len(columns) + 1  # the separators and the two edges


def _cells(plan: Plan, rows: list[PlanRow]) -> list[dict[str, str]]:
    """The cells of ``rows``, and of the budget line last."""
    headers = [h for h, _ in PLAN_COLUMNS] + [SETTINGS_COLUMN]
    budget = dict(zip(headers, budget_cells(plan, headers), strict=True))
    return [*(candidate_cells(row) for row in rows), budget]


def _columns(plan: Plan, rows: list[PlanRow], width: int) -> list[tuple[str, bool]]:
    """The columns that fit ``width``: a column for each setting, or one for them all, and on a
    narrow terminal without tokens/s and bound (the answer above says them for the chosen)."""
    cells = _cells(plan, rows)
    columns = plan_columns(plan, rows)
    if _width(columns, cells) <= width:
        return columns
    columns = compact_columns(columns)
    if _width(columns, cells) <= width:
        return columns
    return [c for c in columns if c[0] not in _NARROW_DROPS]


def _table(plan: Plan, rows: list[PlanRow], width: int) -> Table:
    """The ranked table of ``rows``, laid out for ``width``."""
    cells = _cells(plan, rows)
    columns = _columns(plan, rows, width)
    table = Table(
        box=box.SIMPLE_HEAD,
        title=plan_title(plan),
        title_justify="left",
        caption=needs_caption(plan, rows) + ("; ▶ the chosen plan" if plan.fits else ""),
        caption_justify="left",
    )
    compact = any(h == SETTINGS_COLUMN for h, _ in columns)
    for header, numeric in columns:
        # numbers and names keep their width; the settings wrap at words; in a compact table
        # the headers wrap too, rather than widen their column
        least = max(map(len, _words(header, cells)), default=1)
        widest = max([least, *map(len, header.split())])
        table.add_column(
            header,
            justify="right" if numeric else "left",
            min_width=least,
            max_width=widest if compact and header != SETTINGS_COLUMN else None,
            ratio=1 if header == SETTINGS_COLUMN else None,
        )
    budget_drawn = False
    for row, cell in zip(rows, cells[:-1], strict=True):
        if not row.evaluated.fits and not budget_drawn:
            table.add_section()
            table.add_row(*budget_cells(plan, [h for h, _ in columns]), style="bold red")
            table.add_section()
            budget_drawn = True
        style = "bold green" if row.chosen else "" if row.evaluated.fits else "dim"
        table.add_row(*(Text(cell[h]) for h, _ in columns), style=style)
    return table


def plan_renderable(plan: Plan, *, show_all: bool = False, width: int = _WIDE) -> RenderableType:
    """``plan`` as one rich renderable (what :func:`render_plan` prints): the answer in
    words, the ranked table (at most 15 rows unless ``show_all``; the settings in one column
    when a column each would not fit ``width``), then the notes."""
    rows = shown_rows(plan_rows(plan), show_all)
    parts: list[RenderableType] = [_answer(plan), Text(), _table(plan, rows, width)]
    footer = plan_footer(plan, len(rows), any(not r.evaluated.fits for r in rows))
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
