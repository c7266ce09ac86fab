"""Tables that fit the terminal: how many lines rich wraps a cell into, the least width at
which cells take at most two lines, and a table style that spends little width between columns.

A row of a table that wraps into three or more lines at 80 columns is hard to read; each
renderer picks its columns and widths from the console's width with these, so that every row
takes at most :data:`ROW_LINES` lines.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = [
    "GAP",
    "ROW_LINES",
    "box_width",
    "boxed_widths",
    "bullets",
    "grow",
    "least_width",
    "tight_table",
    "tight_width",
    "wrapped_lines",
]

ROW_LINES = 2  # the most lines a table's row may take
GAP = 2  # the cells between two columns of a tight table: a space of padding and the divider


def wrapped_lines(text: str, width: int, console: Console | None = None) -> int:
    """The lines rich wraps ``text`` into in a column ``width`` cells wide (at words; a word
    wider than the column folded)."""
    out = console if console is not None else Console(width=max(width, 1))
    return max(1, len(Text(text).wrap(out, max(width, 1))))


def grow(widths: list[int], steps: Iterable[tuple[int, int]], spare: int) -> list[int]:
    """``widths`` with ``spare`` cells given out in ``steps``: each ``(column, target)`` widens
    that column towards ``target`` with what is left."""
    out = list(widths)
    for i, target in steps:
        more = max(0, min(spare, target - out[i]))
        out[i] += more
        spare -= more
    return out


def bullets(items: Iterable[str | Text]) -> Table:
    """``items`` as a bulleted list whose wrapped lines stay indented under their text."""
    grid = Table.grid()
    grid.add_column(no_wrap=True)
    grid.add_column()
    for item in items:
        grid.add_row("  • ", item if isinstance(item, Text) else Text(item))
    return grid


def least_width(texts: Iterable[str], lines: int = ROW_LINES) -> int:
    """The least width of a column in which each of ``texts`` takes at most ``lines`` lines,
    its words kept whole."""
    items = [t for t in texts if t]
    if not items:
        return 1
    width = max(cell_len(w) for t in items for w in t.split())
    widest = max(cell_len(t) for t in items)
    console = Console(width=widest)
    while width < widest and any(wrapped_lines(t, width, console) > lines for t in items):
        width += 1
    return width


def tight_table(**options: Any) -> Table:
    """A table with two cells between columns and none at its edges, a rule under its
    header: the most room for the cells on a narrow terminal. ``options`` go to
    :class:`rich.table.Table` (title, caption...)."""
    return Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
        **options,
    )


def box_width(widths: Iterable[int]) -> int:
    """The width of a table in rich's default style (a box, a space either side of each
    cell) whose columns are ``widths`` wide."""
    sizes = list(widths)
    return sum(sizes) + 3 * len(sizes) + 1


def boxed_widths(columns: list[list[str]], width: int) -> list[int] | None:
    """Widths for a table in rich's default style whose ``columns`` (each its header and its
    cells) fit ``width`` with every cell on at most :data:`ROW_LINES` lines, the room left
    given to the columns in turn up to one line each; ``None`` where they cannot fit."""
    least = [least_width(c) for c in columns]
    if box_width(least) > width:
        return None
    natural = [max(map(cell_len, c)) for c in columns]
    return grow(least, enumerate(natural), width - box_width(least))


def tight_width(widths: Iterable[int]) -> int:
    """The width of a :func:`tight_table` whose columns are ``widths`` wide."""
    sizes = list(widths)
    return sum(sizes) + GAP * max(0, len(sizes) - 1)
