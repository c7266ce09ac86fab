"""The table of ``memfit validate``: estimate beside measurement, and the error of each."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from memfit._units import format_bytes

if TYPE_CHECKING:
    from memfit.estimator import Validation

__all__ = ["render_validation"]


def render_validation(result: Validation, console: Console) -> None:
    """Print peak allocated, peak reserved and the non-PyTorch memory, estimated and measured."""
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
