"""A plan (:class:`memfit.planner.Plan`) as HTML, for a notebook: the same words and cells as
the terminal table (:mod:`memfit.report._plan_text`), as an HTML table.

The answer comes first, in words (the chosen configuration and what changes against the
user's, or how far the smallest is over and what would fit), then the ranked table with the
chosen row marked and a budget line between the rows that fit and those that do not, then the
lines on the budget and the step times, and the notes. Every string goes through
:func:`html.escape`.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from memfit.report._html import PAGE_CSS
from memfit.report._plan_text import (
    PlanRow,
    budget_cells,
    candidate_cells,
    chosen_lines,
    needs_caption,
    nothing_fits_lines,
    plan_columns,
    plan_footer,
    plan_rows,
    plan_title,
    shown_rows,
)

if TYPE_CHECKING:  # the planner's package imports torch; rendering needs only the fields
    from memfit.planner import Plan

__all__ = ["PLAN_CSS", "plan_sections"]

PLAN_CSS = (
    PAGE_CSS
    + """
h1 { font-size: 20px; margin: 0 0 8px; }
p.verdict { font-size: 15px; font-weight: 700; padding: 8px 12px; border-radius: 4px; }
p.verdict.fits { color: #1b5e20; background: #e8f5e9; }
p.verdict.short { color: #b71c1c; background: #ffebee; }
ul.changes li, ul.notes li { margin: 3px 0; }
table { border-collapse: collapse; width: 100%; }
th, td { padding: 4px 10px; border-bottom: 1px solid #eee; text-align: left;
         vertical-align: top; }
th { color: #555; font-weight: 600; border-bottom: 2px solid #ddd; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.chosen td { font-weight: 700; color: #1b5e20; background: #f1f8f1; }
tr.over td { color: #888; }
tr.budget td { font-weight: 700; color: #b71c1c; border-top: 2px solid #e57373;
               border-bottom: 2px solid #e57373; }
p.caption, ul.footer { color: #666; font-size: 12px; }
ul.footer { padding-left: 18px; }
"""
)


def _e(text: str) -> str:
    return escape(text, quote=True)


def _answer(plan: Plan) -> list[str]:
    """The answer in words, as the terminal's first lines say it."""
    if plan.chosen is None:
        head, items = nothing_fits_lines(plan)
        css, label = "short", "What would fit:"
    else:
        head, items = chosen_lines(plan)
        css, label = "fits", "What changes against your configuration:"
    listed = "".join(f"<li>{_e(item)}</li>" for item in items)
    return [
        f'<p class="verdict {css}">{_e(head)}</p>',
        f'<p>{_e(label)}</p><ul class="changes">{listed}</ul>',
    ]


def _row(cells: list[str], numeric: list[bool], css: str) -> str:
    tds = "".join(
        f"<td class='num'>{_e(c)}</td>" if n else f"<td>{_e(c)}</td>"
        for c, n in zip(cells, numeric, strict=True)
    )
    return f"<tr class='{css}'>{tds}</tr>" if css else f"<tr>{tds}</tr>"


def _table(plan: Plan, rows: list[PlanRow]) -> str:
    """The ranked table of ``rows``, the budget line before the first that does not fit."""
    columns = plan_columns(plan, rows)
    headers = [h for h, _ in columns]
    numeric = [n for _, n in columns]
    head = "".join(
        f"<th class='num'>{_e(h)}</th>" if n else f"<th>{_e(h)}</th>" for h, n in columns
    )
    body: list[str] = []
    budget_drawn = False
    for row in rows:
        if not row.evaluated.fits and not budget_drawn:
            body.append(_row(budget_cells(plan, headers), numeric, "budget"))
            budget_drawn = True
        cells = candidate_cells(row)
        css = "chosen" if row.chosen else "" if row.evaluated.fits else "over"
        body.append(_row([cells[h] for h in headers], numeric, css))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def plan_sections(plan: Plan, *, show_all: bool = False) -> list[str]:
    """``plan`` as HTML parts: a heading, the answer in words, the ranked table (at most 15
    rows unless ``show_all``), the lines under it and the notes."""
    rows = shown_rows(plan_rows(plan), show_all)
    caption = needs_caption(plan, rows) + ("; ▶ the chosen plan" if plan.fits else "")
    footer = plan_footer(plan, len(rows), any(not r.evaluated.fits for r in rows))
    parts = [
        f"<h1>{_e(plan_title(plan))}</h1>",
        *_answer(plan),
        _table(plan, rows),
        f'<p class="caption">{_e(caption)}</p>',
        '<ul class="footer">' + "".join(f"<li>{_e(line)}</li>" for line in footer) + "</ul>",
    ]
    if plan.notes:
        notes = "".join(f"<li>{_e(note)}</li>" for note in plan.notes)
        parts.append(f'<h2>Notes</h2><ul class="notes">{notes}</ul>')
    return parts
