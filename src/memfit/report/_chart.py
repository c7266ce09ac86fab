"""What the timeline charts draw, computed once for the PNG and the SVG.

A timeline holds one point per allocator event, up to about a million. No chart needs that
many: :func:`memfit._series.downsample` keeps the maximum of each bucket so the peak (the one
number the chart exists to show) survives exactly. This module places phases, chooses the
unit (GiB, or MiB for small workloads) and the ticks, and decides whether the GPU's capacity
line is near enough to the curve to draw without flattening it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from memfit._series import DEFAULT_MAX_POINTS, Series, downsample
from memfit._units import GiB, MiB, format_bytes
from memfit.estimator import Estimate
from memfit.report._text import workload_title

__all__ = [
    "ALLOCATED_COLOR",
    "CAPACITY_COLOR",
    "DEFAULT_MAX_POINTS",
    "PEAK_COLOR",
    "RESERVED_COLOR",
    "ChartData",
    "PhaseSpan",
    "chart_data",
    "format_index",
    "nice_ticks",
    "phase_color",
    "unit_caption",
]

# The capacity line is drawn only when it is at most this many times the top of the curve;
# further up it would squash the curve into a flat line at the bottom of the chart.
_CAPACITY_ZOOM_LIMIT = 2.5

ALLOCATED_COLOR = "#1f4e9c"
RESERVED_COLOR = "#e07b00"
CAPACITY_COLOR = "#c62828"
PEAK_COLOR = "#c62828"
_PHASE_COLORS = {
    "forward": "#4c9be8",
    "backward": "#a66bd6",
    "optimizer": "#4caf50",
    "zero_grad": "#9e9e9e",
}
_OTHER_PHASE_COLOR = "#bdbdbd"


def phase_color(kind: str) -> str:
    """The band colour of a phase kind (``forward``, ``backward``, ``optimizer``...)."""
    return _PHASE_COLORS.get(kind, _OTHER_PHASE_COLOR)


@dataclass(frozen=True, slots=True)
class PhaseSpan:
    """A phase over events ``start`` (inclusive) to ``end`` (exclusive)."""

    name: str
    kind: str  # the part after the last dot: "step1.backward" -> "backward"
    start: int
    end: int
    peak_allocated: int  # highest allocated memory inside the span


@dataclass(frozen=True, slots=True)
class ChartData:
    """Everything a timeline chart draws, in bytes and event indices."""

    title: str
    length: int  # events in the full timeline
    series: Series
    phases: list[PhaseSpan]
    peak_index: int
    peak_allocated: int
    peak_reserved: int
    capacity: int | None  # GPU total minus non-PyTorch memory; None without a GPU
    capacity_label: str  # for the legend: the GPU, how the line is derived, and its size
    capacity_short: str  # for a label on the line itself
    capacity_on_chart: bool
    unit: int  # bytes per axis unit
    unit_name: str  # "GiB" or "MiB"
    y_top: int  # bytes at the top of the y axis
    y_ticks: list[float]  # in axis units


def nice_ticks(top: float, target: int = 6) -> list[float]:
    """Round tick values from 0 to at most ``top``: steps of 1, 2, 2.5 or 5 times a power of 10."""
    if top <= 0:
        return [0.0]
    raw = top / target
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    count = math.floor(top / step + 1e-9)
    return [round(i * step, 10) for i in range(count + 1)]


def format_index(value: float) -> str:
    """An event index for an axis: ``0``, ``750``, ``12.5k``, ``1.2M``."""
    if value >= 1_000_000:
        return f"{value / 1e6:g}M"
    if value >= 10_000:
        return f"{value / 1e3:g}k"
    return f"{value:g}"


def unit_caption(data: ChartData) -> str:
    """The axis unit with its definition: ``GiB = 2^30 bytes``."""
    return f"{data.unit_name} = 2^{data.unit.bit_length() - 1} bytes"


def _phase_spans(
    phases: Sequence[tuple[str, int]], alloc: np.ndarray, length: int
) -> list[PhaseSpan]:
    starts = sorted(((max(0, s), name) for name, s in phases), key=lambda item: item[0])
    spans: list[PhaseSpan] = []
    for i, (start, name) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else length
        end = min(end, length)
        if end <= start:
            continue
        peak = int(alloc[start:end].max())
        spans.append(PhaseSpan(name, name.rsplit(".", 1)[-1], start, end, peak))
    return spans


def chart_data(estimate: Estimate, max_points: int = DEFAULT_MAX_POINTS) -> ChartData:
    """Prepare the timeline of ``estimate`` for drawing."""
    timeline = estimate.timeline
    length = min(len(timeline.allocated), len(timeline.reserved))
    alloc = np.asarray(timeline.allocated[:length], dtype=np.int64)
    resv = np.asarray(timeline.reserved[:length], dtype=np.int64)
    if length:
        peak_index = int(alloc.argmax())
        peak_allocated = int(alloc[peak_index])
        peak_reserved = int(resv.max())
    else:
        peak_index, peak_allocated, peak_reserved = 0, 0, 0
    data_top = max(peak_allocated, peak_reserved)

    capacity: int | None = None
    capacity_label = ""
    capacity_short = ""
    capacity_on_chart = False
    if estimate.gpu is not None:
        capacity = estimate.gpu.total - estimate.non_pytorch
        capacity_label = (
            f"{estimate.gpu.name} minus non-PyTorch memory: {format_bytes(capacity, precision=1)}"
        )
        capacity_short = f"{estimate.gpu.name}: {format_bytes(capacity, precision=1)}"
        capacity_on_chart = capacity > 0 and (
            data_top == 0 or capacity <= _CAPACITY_ZOOM_LIMIT * data_top
        )

    top = max(data_top, capacity if capacity_on_chart and capacity else 0)
    unit, unit_name = (GiB, "GiB") if top >= GiB else (MiB, "MiB")
    # Headroom above the highest line for the phase labels along the top edge.
    y_top = max(int(top * 1.15), unit)
    ticks = nice_ticks(y_top / unit)
    return ChartData(
        title=workload_title(estimate.workload),
        length=length,
        series=downsample(timeline.allocated, timeline.reserved, max_points),
        phases=_phase_spans(timeline.phases, alloc, length) if length else [],
        peak_index=peak_index,
        peak_allocated=peak_allocated,
        peak_reserved=peak_reserved,
        capacity=capacity,
        capacity_label=capacity_label,
        capacity_short=capacity_short,
        capacity_on_chart=capacity_on_chart,
        unit=unit,
        unit_name=unit_name,
        y_top=y_top,
        y_ticks=ticks,
    )
