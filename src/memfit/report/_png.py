"""Draw the memory timeline of an estimate as a PNG with matplotlib.

The figure is made by ``_figure.new_axes`` (matplotlib, an optional extra; never pyplot).
"""

from __future__ import annotations

from typing import Any

from memfit._units import format_bytes
from memfit.estimator import Estimate
from memfit.report._chart import (
    ALLOCATED_COLOR,
    CAPACITY_COLOR,
    DEFAULT_MAX_POINTS,
    PEAK_COLOR,
    RESERVED_COLOR,
    ChartData,
    chart_data,
    format_index,
    phase_color,
    unit_caption,
)
from memfit.report._figure import new_axes
from memfit.report._paths import PathLike, output_path

__all__ = ["write_estimate_png"]

_WIDTH_IN = 12.0
_HEIGHT_IN = 5.8
_DPI = 130
_LABEL_FONT = 8.5
# Roughly how wide one character of the phase labels is, in inches, to skip labels that
# would not fit inside their band (the band colours are in the legend either way).
_CHAR_IN = _LABEL_FONT * 0.62 / 72
_PLOT_WIDTH_IN = _WIDTH_IN * 0.86
_LEGEND_FONT = 9
_LEGEND_CHAR_IN = _LEGEND_FONT * 0.6 / 72
_LEGEND_HANDLE_IN = 0.75  # the swatch and the spacing around an entry


def _phases(ax: Any, data: ChartData) -> list[Any]:
    """Shade and label the phases; return one legend handle per phase kind."""
    from matplotlib.patches import Patch

    span = max(data.length - 1, 1)
    kinds: dict[str, Any] = {}
    for phase in data.phases:
        color = phase_color(phase.kind)
        ax.axvspan(phase.start, phase.end, color=color, alpha=0.13, linewidth=0, zorder=0)
        ax.axvline(phase.start, color=color, alpha=0.6, linewidth=0.8, zorder=1)
        kinds.setdefault(phase.kind, Patch(facecolor=color, alpha=0.35, label=phase.kind))
        band_in = (phase.end - phase.start) / span * _PLOT_WIDTH_IN
        if len(phase.name) * _CHAR_IN + 0.08 < band_in:
            ax.text(
                (phase.start + phase.end) / 2,
                0.985,
                phase.name,
                transform=ax.get_xaxis_transform(),
                ha="center",
                va="top",
                fontsize=_LABEL_FONT,
                color="#333333",
                zorder=5,
            )
    return list(kinds.values())


def _lines(ax: Any, data: ChartData) -> list[Any]:
    """Draw allocated, reserved and the capacity; return their legend handles in that order."""
    from matplotlib.lines import Line2D

    unit = data.unit
    series = data.series
    (allocated,) = ax.plot(
        series.x,
        [v / unit for v in series.allocated],
        color=ALLOCATED_COLOR,
        linewidth=1.5,
        label="allocated (max_memory_allocated)",
        zorder=4,
    )
    (reserved,) = ax.plot(
        series.x,
        [v / unit for v in series.reserved],
        color=RESERVED_COLOR,
        linewidth=1.3,
        label="reserved (max_memory_reserved)",
        zorder=3,
    )
    handles = [allocated, reserved]
    if data.capacity is not None and data.capacity_on_chart:
        handles.append(
            ax.axhline(
                data.capacity / unit,
                color=CAPACITY_COLOR,
                linestyle="--",
                linewidth=1.3,
                label=data.capacity_label,
                zorder=2,
            )
        )
    elif data.capacity is not None:
        # Only in the legend: on the chart it would flatten the curve to the bottom.
        handles.append(
            Line2D(
                [],
                [],
                color=CAPACITY_COLOR,
                linestyle="--",
                linewidth=1.3,
                label=f"{data.capacity_label} (above the chart, not drawn)",
            )
        )
    return handles


def _peak(ax: Any, data: ChartData) -> None:
    if not data.length:
        ax.text(
            0.5,
            0.5,
            "no timeline recorded",
            transform=ax.transAxes,
            ha="center",
            va="center",
            color="#666666",
        )
        return
    peak_y = data.peak_allocated / data.unit
    ax.plot(
        [data.peak_index],
        [peak_y],
        marker="o",
        markersize=7,
        color=PEAK_COLOR,
        markeredgecolor="white",
        linestyle="none",
        zorder=6,
    )
    on_right = data.peak_index > 0.6 * max(data.length - 1, 1)
    if data.capacity is not None and data.capacity_on_chart:
        # Label the capacity line on the side away from the peak label.
        ax.annotate(
            data.capacity_short,
            xy=(0.008 if on_right else 0.992, data.capacity / data.unit),
            xycoords=ax.get_yaxis_transform(),
            xytext=(0, 3),
            textcoords="offset points",
            ha="left" if on_right else "right",
            va="bottom",
            fontsize=_LABEL_FONT,
            color=CAPACITY_COLOR,
            zorder=7,
            bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "alpha": 0.8, "ec": "none"},
        )
    ax.annotate(
        f"peak allocated {format_bytes(data.peak_allocated)}",
        xy=(data.peak_index, peak_y),
        xytext=(-12 if on_right else 12, 8),
        textcoords="offset points",
        ha="right" if on_right else "left",
        va="bottom",
        fontsize=9,
        fontweight="bold",
        color=PEAK_COLOR,
        zorder=7,
        bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "alpha": 0.85, "ec": "none"},
    )


def _axes(ax: Any, data: ChartData) -> None:
    from matplotlib.ticker import FuncFormatter

    ax.set_xlim(0, max(data.length - 1, 1))
    ax.set_ylim(0, data.y_top / data.unit)
    ax.set_yticks(data.y_ticks)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: format_index(v)))
    ax.set_ylabel(f"memory ({unit_caption(data)})")
    ax.set_xlabel("allocator event")
    ax.grid(axis="y", color="#dddddd", linewidth=0.7, zorder=0)
    ax.spines["top"].set_visible(False)
    ax.spines["right"].set_visible(False)
    ax.set_title(f"Memory over the step: {data.title}", loc="left", fontsize=11)


def _legend_rows(ax: Any, handles: list[Any]) -> None:
    """Legends under the axes, one row each, filled left to right and wrapped to the width.

    One legend per row keeps the entries in reading order (a multi-column legend fills
    column by column) and lets a long capacity label wrap instead of running off the figure.
    """
    rows: list[list[Any]] = [[]]
    width = 0.0
    for handle in handles:
        entry = _LEGEND_HANDLE_IN + len(handle.get_label()) * _LEGEND_CHAR_IN
        if rows[-1] and width + entry > _PLOT_WIDTH_IN:
            rows.append([])
            width = 0.0
        rows[-1].append(handle)
        width += entry
    for i, row in enumerate(rows):
        legend = ax.legend(
            handles=row,
            loc="upper center",
            bbox_to_anchor=(0.5, -0.11 - 0.06 * i),
            ncol=len(row),
            frameon=False,
            fontsize=_LEGEND_FONT,
        )
        if i < len(rows) - 1:
            ax.add_artist(legend)


def write_estimate_png(
    estimate: Estimate, path: PathLike, *, max_points: int = DEFAULT_MAX_POINTS
) -> None:
    """Write the memory over the step of ``estimate`` to ``path`` as a PNG.

    Allocated and reserved memory after each allocator event (downsampled to ``max_points``
    keeping each bucket's maximum), the phases as shaded bands, the peak, and the memory the
    GPU leaves to PyTorch when the estimate has one. Needs matplotlib (``memfit[plot]``).
    """
    target = output_path(path, "PNG plot", ".png")
    fig, ax = new_axes(_WIDTH_IN, _HEIGHT_IN, _DPI)
    data = chart_data(estimate, max_points)
    phase_handles = _phases(ax, data)
    line_handles = _lines(ax, data)
    _peak(ax, data)
    _axes(ax, data)
    _legend_rows(ax, line_handles + phase_handles)
    fig.savefig(target, format="png")
