"""``memfit calibrate``'s answer: where the calibration went, and its rates beside memfit's."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from memfit.planner.calibration import headline
from memfit.report._fit import boxed_widths, bullets


def _shown(kind: str, value: float | None) -> str:
    if value is None:
        return "-"
    if kind == "flops":
        return f"{value / 1e12:,.0f} TFLOP/s"
    if kind == "bytes":
        return f"{value / 1e9:,.0f} GB/s"
    return f"{value * 1e6:,.2f} us"


def render_calibration(
    data: dict[str, Any], base: dict[str, Any], where: str | None, console: Console
) -> None:
    """Print a calibration ``data`` (``memfit calibrate``'s) beside ``base`` (memfit's own of
    the same GPU type, or the H200's), with where it was written (``None``: not written)."""
    measured = data.get("measured", {})
    console.print(
        f"Calibrated {data['gpu']} in {measured.get('seconds', 0):.0f} s "
        f"({', '.join(measured.get('parts', []))})"
        + (f": written to {where}" if where else ": not written (--no-save)")
    )
    table = Table(title=f"this machine beside memfit's {base['gpu']} ({base['source']})")
    for col in ("rate", "this machine", "memfit's", "ratio"):
        table.add_column(col, justify="left" if col == "rate" else "right")
    for (what, kind, mine), (_, _, theirs) in zip(headline(data), headline(base), strict=True):
        ratio = f"{mine / theirs:.2f}x" if mine and theirs else "-"
        table.add_row(what, _shown(kind, mine), _shown(kind, theirs), ratio)
    console.print(table)
    factors = measured.get("host", {}).get("factors")
    if factors:
        shown = ", ".join(f"{k} {v:.2f}x" for k, v in factors.items() if k != "all")
        console.print(
            f"The host's cost of an op, measured on reference steps at a batch of one: "
            f"{factors['all']:.2f}x memfit's ({shown})."
        )
    if measured.get("kept"):
        console.print(f"Kept from memfit's calibration: {', '.join(measured['kept'])}.")
    failed = measured.get("conv_failed") or []
    if failed:
        console.print(f"{len(failed)} convolution sizes did not run (in --json: conv_failed).")
    if where:
        console.print(
            "memfit plan and memfit.plan now time candidates on this GPU type with it "
            "(a note says so); --calibration FILE picks another."
        )


def render_saved_calibrations(rows: list[dict[str, Any]], folder: str, console: Console) -> None:
    """Print the calibrations ``memfit calibrate`` saved on this machine (``key``, ``gpu``,
    ``source``, ``path`` each), or that there are none in ``folder``."""
    if not rows:
        console.print(
            f"No calibration saved in {folder}: memfit plan times steps with memfit's own "
            "(the H200's). Run memfit calibrate on the GPU to measure this machine's."
        )
        return
    title = f"calibrations saved in {folder} (memfit plan uses each for its type)"
    cells = [[row["key"], row["gpu"], row["source"], row["path"]] for row in rows]
    headers = ("GPU type", "GPU", "measured", "file")
    widths = boxed_widths([list(c) for c in zip(headers, *cells, strict=True)], console.width)
    if widths is None:  # a source too long for a row of two lines: a list, a file an item
        items = [f"{key} ({gpu}): {path}, {source}" for key, gpu, source, path in cells]
        console.print(Group(Text(title, style="italic"), bullets(items)))
        return
    table = Table(title=title)
    for header, width in zip(headers, widths, strict=True):
        table.add_column(header, width=width, overflow="fold")
    for row_cells in cells:
        table.add_row(*(Text(cell) for cell in row_cells))
    console.print(table)
