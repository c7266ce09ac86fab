"""Which columns the plan's table has, and how wide each is, for the console's width.

Four layouts, the fullest first; the table takes the first that fits the width with every row
on at most two lines:

* ``full``: a column for each setting (precision, checkpointing, optimizer, allocator), every
  cell on one line;
* ``words``: the settings in one column, in words (``bf16-mixed, full checkpointing, ...``);
* ``tags``: the settings as short tags (``bf16-mixed ckpt adamw-fused``), a legend under the
  table;
* ``narrow``: the tags without the tokens/s and bound columns (a footnote says what they hold
  and how wide a terminal shows them); at 80 columns a plan of a text model lands here.

Every column gets a fixed width: the least its cells need (the settings: the least at which
each takes two lines), then the width left over goes to the settings, so that they take one
line where they can, and to the headers, so that they wrap less. A console narrower than the
narrow layout's least gets that layout with the settings squeezed into what is left.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.cells import cell_len

from memfit.report._fit import grow, least_width, tight_width
from memfit.report._plan_text import (
    PLAN_COLUMNS,
    SETTINGS_COLUMN,
    TOKENS_COLUMN,
    PlanRow,
    budget_cells,
    candidate_cells,
    compact_columns,
    plan_columns,
    settings_tags,
)

if TYPE_CHECKING:
    from memfit.planner import Plan

__all__ = ["NARROW_DROPS", "PlanLayout", "layout_cells", "plan_layout"]

NARROW_DROPS = (TOKENS_COLUMN, "bound")  # the columns the narrow layout leaves out
_LEAST_SETTINGS = 10  # the settings column's width when nothing fits: they wrap as they must


@dataclass(frozen=True)
class PlanLayout:
    """A layout of the plan's table: its columns (header, right-aligned), their widths,
    whether the settings are tags, and the columns it leaves out that a wider one shows
    (``wider``: the least width of the layout that shows them)."""

    name: str
    columns: list[tuple[str, bool]]
    widths: list[int]
    tags: bool
    dropped: tuple[str, ...] = ()
    wider: int = 0

    @property
    def width(self) -> int:
        """The table's width."""
        return tight_width(self.widths)


def layout_cells(plan: Plan, rows: list[PlanRow], tags: bool) -> list[dict[str, str]]:
    """The cells of ``rows`` by header, and of the budget line last; with ``tags``, the
    settings' cell holds their tags."""
    headers = [h for h, _ in PLAN_COLUMNS] + [SETTINGS_COLUMN]
    cells = [candidate_cells(row) for row in rows]
    if tags:
        for cell, row in zip(cells, rows, strict=True):
            cell[SETTINGS_COLUMN] = " ".join(settings_tags(row.evaluated.candidate))
    return [*cells, dict(zip(headers, budget_cells(plan, headers), strict=True))]


def _header_least(header: str) -> int:
    return max(cell_len(w) for w in header.split())


def _least(header: str, cells: list[dict[str, str]]) -> int:
    """The least width of ``header``'s column: its cells whole (the settings on two lines),
    and the header's longest word."""
    texts = [c[header] for c in cells]
    if header == SETTINGS_COLUMN:
        return max(least_width(texts), _header_least(header))
    return max([_header_least(header), *(cell_len(t) for t in texts)])


def _natural(header: str, cells: list[dict[str, str]]) -> int:
    """The width at which ``header``'s column has every cell and the header on one line."""
    return max([cell_len(header), *(cell_len(c[header]) for c in cells)])


def _widths(columns: list[tuple[str, bool]], cells: list[dict[str, str]], width: int) -> list[int]:
    """Each column's least width, and what is left of ``width`` given first to the headers
    that would take three lines or more (up to two), then to the settings (up to one line
    each), then to the headers (up to one line)."""
    widths = [_least(h, cells) for h, _ in columns]
    spare = width - tight_width(widths)
    settings = [i for i, (h, _) in enumerate(columns) if h == SETTINGS_COLUMN]
    others = [i for i in range(len(columns)) if i not in settings]
    steps = [(i, least_width([columns[i][0]])) for i in others]
    steps += [(i, _natural(columns[i][0], cells)) for i in settings + others]
    return grow(widths, steps, spare)


def _candidates(plan: Plan, rows: list[PlanRow]) -> list[tuple[str, list[tuple[str, bool]], bool]]:
    """The layouts' names, columns and whether their settings are tags, the fullest first."""
    full = plan_columns(plan, rows)
    compact = compact_columns(full)
    narrow = [c for c in compact if c[0] not in NARROW_DROPS]
    return [
        ("full", full, False),
        ("words", compact, False),
        ("tags", compact, True),
        ("narrow", narrow, True),
    ]


def plan_layout(plan: Plan, rows: list[PlanRow], width: int) -> PlanLayout:
    """The fullest layout of ``rows``' table that fits ``width`` with every row on at most two
    lines (see the module's docstring)."""
    tried: list[PlanLayout] = []
    for name, columns, tags in _candidates(plan, rows):
        cells = layout_cells(plan, rows, tags)
        least = [_least(h, cells) for h, _ in columns]
        layout = PlanLayout(name, columns, least, tags)
        if layout.width <= width:
            layout = PlanLayout(name, columns, _widths(columns, cells, width), tags)
            break
        tried.append(layout)
    else:  # nothing fits: the narrow layout, its settings wrapping into what is left
        i = next(i for i, (h, _) in enumerate(layout.columns) if h == SETTINGS_COLUMN)
        widths = list(layout.widths)
        widths[i] = max(_LEAST_SETTINGS, widths[i] - (layout.width - width))
        layout = PlanLayout(layout.name, layout.columns, widths, tags)
    shown = {h for h, _ in layout.columns}
    dropped = tuple(h for h, _ in plan_columns(plan, rows) if h in NARROW_DROPS and h not in shown)
    if dropped:
        wider = min(t.width for t in tried if set(dropped) <= {h for h, _ in t.columns})
        layout = PlanLayout(layout.name, layout.columns, layout.widths, tags, dropped, wider)
    return layout
