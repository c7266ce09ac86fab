"""A plan (:class:`memfit.planner.Plan`) as Markdown, for a README, docs or an issue:
:func:`plan_markdown`. The same words and cells as the terminal table
(:mod:`memfit.report._plan_text`), as a GitHub-flavoured table."""

from __future__ import annotations

from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from memfit.planner import Plan

__all__ = ["plan_markdown"]


def _escape(text: str) -> str:
    """A table cell's text: ``|`` would end the cell."""
    return text.replace("|", "\\|")


def _table(plan: Plan, rows: list[PlanRow]) -> list[str]:
    """The ranked table of ``rows``, a line each, the budget line among them."""
    columns = plan_columns(plan, rows)
    lines = [
        "| " + " | ".join(h for h, _ in columns) + " |",
        "|" + "|".join("---:" if numeric else "---" for _, numeric in columns) + "|",
    ]
    budget_drawn = False
    for row in rows:
        if not row.evaluated.fits and not budget_drawn:
            cells = budget_cells(plan, [h for h, _ in columns])
            lines.append("| " + " | ".join(f"**{c}**" if c else "" for c in cells) + " |")
            budget_drawn = True
        values = candidate_cells(row)
        cells = [_escape(values[h]) for h, _ in columns]
        if row.chosen:
            cells = [f"**{c}**" for c in cells]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def plan_markdown(plan: Plan, *, show_all: bool = False) -> str:
    """``plan`` as Markdown: a heading, the answer in words, the ranked table (at most 15
    rows unless ``show_all``), the notes and where the step times come from."""
    out = [f"## {plan_title(plan)}", ""]
    if plan.chosen is None:
        head, items = nothing_fits_lines(plan)
        label = "What would fit:"
    else:
        head, items = chosen_lines(plan)
        label = "What changes against your configuration:"
    out += [head, "", label, ""]
    out += [f"- {item}" for item in items]
    rows = shown_rows(plan_rows(plan), show_all)
    table = _table(plan, rows)
    out += ["", *table, ""]
    out.append(
        needs_caption(plan, rows) + "." + (" The chosen plan is in bold." if plan.fits else "")
    )
    out += [
        "",
        *(
            f"{line}  "
            for line in plan_footer(plan, len(rows), any(not r.evaluated.fits for r in rows))
        ),
    ]
    if plan.notes:
        out += ["", "Notes:", ""]
        out += [f"- {note}" for note in plan.notes]
    return "\n".join(out).rstrip() + "\n"
