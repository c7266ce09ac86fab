"""The tables of ``memfit validate``: estimate beside measurement, and the error of each; the
library versions the estimate assumed beside the GPU host's, any that differ marked."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from memfit._units import format_bytes

if TYPE_CHECKING:
    from memfit.estimator import Validation, Versions

__all__ = ["DIFFERS", "render_validation", "versions_table"]

DIFFERS = "differs"  # the mark beside a library whose version differs


def render_validation(result: Validation, console: Console) -> None:
    """Print peak allocated, peak reserved and the non-PyTorch memory, estimated and measured,
    then the library versions of both sides."""
    real = result.measured
    table = Table(
        title=f"{result.estimate.workload.model}: estimate vs {real.gpu_name}, "
        f"torch {real.torch_version}"
    )
    for col in ("", "estimate", "measured", "error"):
        table.add_column(col, justify="right")
    for label, estimated, measured in result.rows():
        if measured is None:
            continue  # NVML could not tell the process's memory
        error = result.error(estimated, measured)
        table.add_row(
            label,
            format_bytes(estimated),
            format_bytes(measured),
            "n/a" if error is None else f"{error * 100:+.2f}%",
        )
    console.print(table)
    for note in real.notes:
        console.print(f"Measured: {note}.", style="yellow")
    console.print(versions_table(result.estimate.versions, real.versions))
    if result.estimate.versions.differing(real.versions):
        console.print(
            "Memory depends on library versions: where they differ, the estimate is for the "
            "versions it assumed, not for this GPU host's.",
            style="yellow",
        )


def versions_table(assumed: Versions, host: Versions) -> Table:
    """Each library's version as the estimate assumed it and on the GPU host that measured,
    with :data:`DIFFERS` beside those whose release differs (build suffixes such as ``+cu130``
    are not compared)."""
    differing = set(assumed.differing(host))
    table = Table(title="library versions")
    for col in ("library", "estimate assumed", "GPU host", ""):
        table.add_column(col)
    for (name, mine), (_, theirs) in zip(assumed.items(), host.items(), strict=True):
        mark = Text(DIFFERS, style="bold yellow") if name in differing else Text("")
        table.add_row(name, mine or "not installed", theirs or "not installed", mark)
    return table
