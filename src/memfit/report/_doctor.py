"""``memfit doctor`` in the terminal: the machine, its GPUs, the frameworks, the memory settings
in the environment, and the advice."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from memfit._units import format_bytes
from memfit.report._fit import boxed_widths, bullets

if TYPE_CHECKING:
    from memfit.monitor import Diagnosis, ProcessSettings

__all__ = ["render_doctor"]

_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def render_doctor(found: Diagnosis, console: Console) -> None:
    """Print what ``memfit.monitor.diagnose`` found."""
    console.print(
        f"Python {found.python} · NVIDIA driver {found.driver or 'not found'}"
        + (f" (CUDA {found.cuda_driver})" if found.cuda_driver else "")
    )
    if found.gpus:
        gpus = Table(title="GPUs (NVML: every GPU, whatever CUDA_VISIBLE_DEVICES says)")
        for col in ("", "name", "used", "total", "MIG", "processes"):
            gpus.add_column(col, justify="right" if col in ("used", "total") else "left")
        for gpu in found.gpus:
            gpus.add_row(
                str(gpu.index),
                gpu.name,
                format_bytes(gpu.used),
                format_bytes(gpu.total),
                {True: "on", False: "off", None: "n/a"}[gpu.mig],
                str(len(gpu.processes)),
            )
        console.print(gpus)
    frameworks = Table(title="frameworks")
    for col in ("framework", "version", "CUDA build"):
        frameworks.add_column(col)
    for fw in found.frameworks:
        cuda = {None: "n/a", "none": "CPU only"}.get(fw.cuda, fw.cuda or "")
        frameworks.add_row(fw.name, fw.version or "not installed", cuda if fw.version else "")
    console.print(frameworks)
    settings = Table(title="memory settings in the environment (read when a framework starts)")
    for col in ("variable", "value"):
        settings.add_column(col)
    for name, value in found.settings.items():
        settings.add_row(name, value if value is not None else "unset")
    console.print(settings)
    if found.processes:
        console.print(_processes(found, console.width))
    if not found.advice:
        console.print("Nothing to change.", style="green")
        return
    console.print("Advice", style="bold")
    lines = [
        Text(
            f"{item.severity}: {item.setting}: {item.change}. {item.reason.rstrip('.')}.",
            style=_STYLE[item.severity],
        )
        for item in found.advice
    ]
    console.print(bullets(lines))


_PROCESS_HEADERS = ("pid", "GPU", "from", "settings", "frameworks")


def _process_cells(p: ProcessSettings) -> list[str]:
    """One process's cells: its pid, GPUs, where its settings were read, the settings, and
    what its frameworks use and hold."""
    env = " ".join(f"{k}={v}" for k, v in p.environment.items()) or "none set"
    rows = []
    for row in p.stats:
        if row.kind != "gpu":
            continue
        held = "" if row.pool is None else f", holds {format_bytes(row.pool)}"
        used = "n/a" if row.in_use is None else format_bytes(row.in_use)
        rows.append(f"{row.framework} {row.device}: uses {used}{held}")
    started = ", ".join(p.started) if p.started else ""
    frameworks = "; ".join(rows) or (f"{started} started" if started else "-")
    return [str(p.pid), ",".join(str(g) for g in p.gpus) or "-", p.source, env, frameworks]


def _process_line(cells: list[str]) -> str:
    """A process's cells as one item of the narrow list."""
    pid, gpus, source, env, frameworks = cells
    where = "" if gpus == "-" else f" on GPU {gpus}"
    return f"pid {pid}{where} ({source}): settings {env}; frameworks {frameworks}"


def _processes(found: Diagnosis, width: int) -> RenderableType:
    """The running processes' settings: a table where each row fits two lines in ``width``,
    else a list, a process an item."""
    title = (
        "running processes' memory settings (published: memfit.publish or memfit run; "
        "environment: /proc/PID/environ)"
    )
    rows = [_process_cells(p) for p in found.processes]
    widths = boxed_widths([list(c) for c in zip(_PROCESS_HEADERS, *rows, strict=True)], width)
    if widths is None:
        return Group(Text(title, style="italic"), bullets(_process_line(row) for row in rows))
    table = Table(title=title)
    for header, w in zip(_PROCESS_HEADERS, widths, strict=True):
        table.add_column(header, width=w, overflow="fold")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    return table
