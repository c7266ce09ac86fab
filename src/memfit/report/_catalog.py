"""The bundled models (``memfit estimate --list-models``) as a table that fits the terminal.

Names are never cut: they are what the user types. The aliases wrap at their commas, into two
lines at most; the descriptions come as a last column where the terminal leaves them room for
two lines each, and a footnote says how wide a terminal shows them otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from memfit.report._fit import grow, least_width, tight_table, tight_width

__all__ = ["render_catalog"]

_HEADERS = ("name", "parameters", "source", "aliases", "description")


def _cells(entry: Mapping[str, Any]) -> list[str]:
    return [
        entry["name"],
        f"{entry['parameters'] / 1e6:,.0f}M",
        entry["source"],
        ", ".join(entry.get("aliases", [])),
        entry.get("description", ""),
    ]


def _widths(rows: list[list[str]], width: int) -> tuple[list[int], int]:
    """The columns' widths for ``width`` (four, or five with the descriptions), and the least
    width that shows the descriptions."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in _HEADERS]
    whole = [
        max([cell_len(h), *map(cell_len, c)])
        for h, c in zip(_HEADERS[:3], columns[:3], strict=True)
    ]
    least = [*whole, least_width([*columns[3], _HEADERS[3]]), least_width(columns[4])]
    natural = whole + [
        max([cell_len(h), *map(cell_len, c)])
        for h, c in zip(_HEADERS[3:], columns[3:], strict=True)
    ]
    with_descriptions = tight_width(least)
    widths = least if with_descriptions <= width else least[:4]
    # the aliases on one line first, then the descriptions
    steps = [(i, natural[i]) for i in range(3, len(widths))]
    return grow(widths, steps, width - tight_width(widths)), with_descriptions


def render_catalog(entries: Mapping[str, Mapping[str, Any]], console: Console) -> None:
    """Print the catalog's ``entries`` (:func:`memfit.workload.catalog_entries`) as a table
    as wide as ``console``, each row on at most two lines."""
    rows = [_cells(e) for e in entries.values()]
    widths, wider = _widths(rows, console.width)
    table = tight_table(title="Bundled models (no download needed)", title_justify="left")
    for header, w in zip(_HEADERS, widths, strict=False):
        table.add_column(
            header,
            width=w,
            justify="right" if header == "parameters" else "left",
            style="bold" if header == "name" else "",
            overflow="fold",
        )
    for row in rows:
        table.add_row(*(Text(cell) for cell in row[: len(widths)]))
    console.print(table)
    if len(widths) < len(_HEADERS):
        console.print(
            f"Descriptions: in a terminal at least {wider} columns wide, or with --json.",
            style="dim",
            highlight=False,
        )
