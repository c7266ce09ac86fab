"""What a renderer printed at a given terminal width: the text, the tables in it, and how many
lines each row of each table took.

A table's row heights are read from a copy of it drawn with a rule between every row: the
copy has the same columns, widths and cells (one-cell dividers, as the table's own), so its
rows wrap as the table's did. A grid (no box) has no rules: a row starts where its first
column, a label that never wraps, has text.
"""

from __future__ import annotations

import copy
import io
from collections.abc import Callable
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

__all__ = ["Printed", "printed", "row_heights"]

_RULE = set("─━┼╇╋┿├┤┌┐└┘┬┴┡┩┃│ ")


class _Keeping(Console):
    """A console that keeps what it was given to print, as well as the text."""

    def __init__(self, width: int) -> None:
        super().__init__(
            width=width, record=True, color_system=None, highlight=False, file=io.StringIO()
        )
        self.kept: list[Any] = []

    def print(self, *objects: Any, **kwargs: Any) -> None:
        self.kept.extend(objects)
        super().print(*objects, **kwargs)


class Printed:
    """The text a renderer printed at ``width``, and the tables in it."""

    def __init__(self, text: str, tables: list[Table], width: int) -> None:
        self.text = text
        self.tables = tables
        self.width = width

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()

    def widest(self) -> int:
        return max((cell_len(line) for line in self.lines), default=0)

    def tallest_row(self) -> int:
        """The most lines a row of any table took (a bulleted list's items are not rows)."""
        heights = [h for t in self.tables for h in row_heights(t, self.width)]
        return max(heights, default=0)


def _tables(thing: Any) -> list[Table]:
    if isinstance(thing, Table):
        return [thing]
    if isinstance(thing, Group):
        return [t for part in thing.renderables for t in _tables(part)]
    return []


def printed(draw: Callable[[Console], Any], width: int) -> Printed:
    """Call ``draw(console)`` with a console ``width`` columns wide; what it printed."""
    console = _Keeping(width)
    draw(console)
    tables = [t for thing in console.kept for t in _tables(thing)]
    return Printed(console.export_text(), tables, width)


def _plain(cell: Any) -> str:
    return cell.plain if isinstance(cell, Text) else str(cell)


def _is_bullets(table: Table) -> bool:
    first = [_plain(c) for c in table.columns[0].cells] if table.columns else []
    return bool(first) and all(c.strip() == "•" for c in first)


def row_heights(table: Table, width: int) -> list[int]:
    """The lines each row of ``table`` takes when drawn ``width`` columns wide (a bulleted
    list's items are not counted: they are paragraphs)."""
    console = Console(width=width, record=True, color_system=None, file=io.StringIO())
    if table.box is None:
        if _is_bullets(table):
            return []
        first = max(cell_len(_plain(c)) for c in table.columns[0].cells)
        console.print(table)
        starts = [
            i for i, line in enumerate(console.export_text().splitlines()) if line[:first].strip()
        ]
        ends = [*starts[1:], len(console.export_text().splitlines())]
        return [end - start for start, end in zip(starts, ends, strict=True)]
    ruled = copy.copy(table)
    ruled.box = box.SQUARE
    ruled.show_lines = True
    ruled.title = ruled.caption = None
    console.print(ruled)
    blocks: list[int] = []
    run = 0
    for line in console.export_text().splitlines():
        if set(line) <= _RULE and ("─" in line or "━" in line):
            blocks.append(run)
            run = 0
        else:
            run += 1
    blocks.append(run)
    body = [n for n in blocks if n]
    return body[1:] if table.show_header else body  # the header's block first
