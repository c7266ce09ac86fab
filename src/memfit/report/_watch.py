"""Render a monitor sample in the terminal: GPUs with a bar and a short history, then processes.

The process table puts NVML's figure for each process beside PyTorch's own (allocated,
reserved, peak) and the difference, ``non-torch`` = NVML used - torch reserved: the CUDA
context, cuBLAS/cuDNN workspaces held outside the caching allocator, NCCL buffers. That is the
answer to "why do nvidia-smi and PyTorch disagree". What NVML or the process could not give
prints ``N/A``; a GPU that stopped answering prints ``lost``. Every string from a process
(command, user) goes through :class:`rich.text.Text`, never markup.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from memfit._units import format_bytes
from memfit.monitor import DeviceSample, ProcessSample, Sample
from memfit.report._console import _bar
from memfit.report._fit import tight_table
from memfit.report._text import shorten_middle

__all__ = ["NA", "WatchHistory", "render_sample", "watch_frame"]

NA = "N/A"
_SPARKS = "▁▂▃▄▅▆▇█"
_COMMAND_WIDTH = 96  # the longest a command is shown
_MIN_COMMAND = 30  # narrower than this, the commands go below the numbers
_BAR_WIDTH = 16


def _size(n: int | None) -> str:
    return NA if n is None else format_bytes(n)


class WatchHistory:
    """The last ``length`` memory-used shares of each GPU (keyed by UUID, else index)."""

    def __init__(self, length: int = 40) -> None:
        self.length = length
        self._shares: dict[str, deque[float | None]] = {}

    def add(self, sample: Sample) -> None:
        for dev in sample.devices:
            key = dev.uuid or str(dev.index)
            shares = self._shares.setdefault(key, deque(maxlen=self.length))
            shares.append(_share(dev))

    def sparkline(self, dev: DeviceSample) -> str:
        """One character per sample, ``▁`` (empty) to ``█`` (full); a space where unknown."""
        out = []
        for share in self._shares.get(dev.uuid or str(dev.index), ()):
            if share is None:
                out.append(" ")
            else:
                out.append(_SPARKS[min(len(_SPARKS) - 1, int(share * len(_SPARKS)))])
        return "".join(out)


def _share(dev: DeviceSample) -> float | None:
    if dev.memory_used is None or not dev.memory_total:
        return None
    return dev.memory_used / dev.memory_total


class _GpuView:
    """The GPU table, laid out for the width it gets: the numbers never wrap; on a narrow
    terminal the memory bar gets shorter, then goes with the history (the numbers say it)."""

    def __init__(self, sample: Sample, history: WatchHistory | None) -> None:
        self.sample = sample
        self.history = history

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        unclamped = options.update_width(10_000)  # a measurement is clamped to the width
        for bar_width, history in ((_BAR_WIDTH, self.history), (8, self.history), (0, None)):
            table = _gpu_table(self.sample, history, bar_width)
            if Measurement.get(console, unclamped, table).maximum <= options.max_width:
                break
        yield table


def _gpu_table(sample: Sample, history: WatchHistory | None, bar_width: int = _BAR_WIDTH) -> Table:
    table = Table(title="GPUs", title_justify="left", expand=False)
    table.add_column("gpu", justify="right", no_wrap=True)
    table.add_column("name", justify="left")
    if bar_width:
        table.add_column("memory", justify="left", no_wrap=True)
    for name in ("used / total", "util", "temp", "power", "other"):
        table.add_column(name, justify="right", no_wrap=True)
    if history is not None:
        table.add_column("history", justify="left", no_wrap=True)
    for dev in sample.devices:
        share = _share(dev)
        bar = Text(NA if share is None else _bar(share, bar_width).ljust(bar_width) + "▕")
        if dev.status == "lost":
            used = Text(f"lost ({dev.error})", style="bold red")
        elif dev.status == "error":
            used = Text(f"{NA} ({dev.error})", style="yellow")
        else:
            used = Text(f"{_size(dev.memory_used)} / {_size(dev.memory_total)}")
        row: list[RenderableType] = [
            str(dev.index),
            Text(dev.name or NA),
            *([bar] if bar_width else []),
            used,
            NA if dev.utilization_gpu is None else f"{dev.utilization_gpu}%",
            NA if dev.temperature_c is None else f"{dev.temperature_c}°C",
            NA if dev.power_w is None else f"{dev.power_w:.0f} W",
            _size(dev.other),
        ]
        if history is not None:
            row.append(Text(history.sparkline(dev), style="cyan"))
        table.add_row(*row)
    return table


def _framework_cells(proc: ProcessSample) -> list[str]:
    """fw, in use, pool, peak, outside: torch's allocator stats where published (as before
    the frameworks' schema), else the first framework's numbers."""
    if proc.torch is not None:
        t = proc.torch
        return [
            "torch",
            _size(t.allocated),
            _size(t.reserved),
            _size(t.max_allocated),
            _size(proc.non_torch),
        ]
    row = proc.main_stats
    if row is None:
        note = "no GPU yet" if proc.cuda_initialised is False else "-"
        return ["-", note, "-", "-", "-"]
    name = _SHORT.get(row.framework, row.framework)
    return [name, _size(row.in_use), _size(row.pool), _size(row.peak), _size(proc.outside_pool)]


_SHORT = {"tensorflow": "tf"}


class _ProcessView:
    """The process table, laid out for the width it gets: one row a process where the command
    fits beside the numbers; on a narrow terminal the numbers first, then the commands by pid
    (a command squeezed into the last column would wrap a character a line)."""

    def __init__(self, sample: Sample) -> None:
        self.sample = sample

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        unclamped = options.update_width(10_000)  # a measurement is clamped to the width
        numbers = _process_table(self.sample, command_width=0)
        if Measurement.get(console, unclamped, numbers).maximum > options.max_width:
            # too narrow for boxed cells: two spaces between columns instead of a border
            numbers = _process_table(self.sample, command_width=0, tight=True)
        # what is left of the line for the command: the column's border and padding take 3
        room = options.max_width - Measurement.get(console, options, numbers).maximum - 3
        if room >= _MIN_COMMAND:
            yield _process_table(self.sample, command_width=min(room, _COMMAND_WIDTH))
            return
        yield numbers
        commands = Table(box=None, show_header=False, padding=(0, 1))
        commands.add_column("pid", justify="right", no_wrap=True, style="dim")
        commands.add_column("command", overflow="fold")
        width = max(_MIN_COMMAND, options.max_width - 10)
        for dev in self.sample.devices:
            for proc in dev.processes:
                command = shorten_middle(proc.command, width) if proc.command else NA
                commands.add_row(str(proc.pid), Text(command))
        if commands.row_count:
            yield commands


def _process_table(sample: Sample, command_width: int, tight: bool = False) -> Table:
    """The process table; with a command column of at most ``command_width`` characters
    (the middle of a longer command is left out) unless it is 0; ``tight``: two spaces
    between columns instead of a box (a narrow terminal)."""
    options: dict[str, Any] = {
        "title": "Processes",
        "title_justify": "left",
        "caption": "fw columns: processes that call memfit.publish() or run under memfit run; "
        "in use / pool / peak: torch allocated / reserved / max allocated (JAX bytes_in_use / "
        "pool_bytes / peak, TF current / - / peak); outside = GPU mem - pool (CUDA context, "
        "libraries, NCCL)",
        "caption_justify": "left",
    }
    table = tight_table(**options) if tight else Table(**options)
    for name in ("gpu", "pid"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("user", no_wrap=True)
    table.add_column("GPU mem", justify="right", no_wrap=True)
    table.add_column("fw", no_wrap=True)
    for name in ("in use", "pool", "peak", "outside"):
        table.add_column(name, justify="right", no_wrap=True)
    procs = [(dev, proc) for dev in sample.devices for proc in dev.processes]
    containers = any(proc.container or proc.pod for _, proc in procs)
    if containers:
        table.add_column("container", no_wrap=True)
    if command_width:
        table.add_column("command", no_wrap=True, overflow="ellipsis")
    for dev in sample.devices:
        if dev.processes_error is not None:
            table.add_row(str(dev.index), "", Text(f"{NA}: {dev.processes_error}"))
    for dev, proc in procs:
        command = NA
        if proc.command and command_width:
            command = shorten_middle(proc.command, command_width)
        cells: list[RenderableType] = [
            str(dev.index),
            str(proc.pid),
            Text(proc.user or NA),
            _size(proc.used_memory),
            *_framework_cells(proc),
        ]
        if containers:
            container = proc.container[:12] if proc.container else ""
            pod = f"pod {proc.pod[:8]}" if proc.pod else ""
            cells.append(Text(f"{container} {pod}".strip()))
        table.add_row(*cells, *([Text(command)] if command_width else []))
    if not procs:
        table.add_row("", "", Text("no processes on the selected GPUs", style="dim"))
    return table


def watch_frame(sample: Sample, history: WatchHistory | None = None) -> Group:
    """One frame of ``memfit watch``: a header, the GPU table, the process table."""
    import datetime

    when = datetime.datetime.fromtimestamp(sample.time).strftime("%Y-%m-%d %H:%M:%S")
    header = Text(f"memfit watch  {when}", style="bold")
    header.append(f" · driver {sample.driver_version or NA} · {len(sample.devices)} GPU(s)")
    units = Text("GiB = 2^30 bytes, MiB = 2^20 bytes", style="dim")
    return Group(header, _GpuView(sample, history), _ProcessView(sample), units)


def render_sample(
    sample: Sample, console: Console | None = None, history: WatchHistory | None = None
) -> None:
    """Print one frame (``memfit watch --once``)."""
    (console or Console()).print(watch_frame(sample, history))
