"""Draw the memory timeline of an estimate as SVG text, with no dependency beyond numpy.

The same chart as the PNG, written by hand so that the HTML report stays one self-contained
file that works offline, and so that an SVG plot needs no matplotlib. Every piece of text
that reaches the markup goes through :func:`html.escape`. Phase bands and the peak carry
``<title>`` elements, which browsers show on hover.
"""

from __future__ import annotations

from html import escape

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
    nice_ticks,
    phase_color,
    unit_caption,
)
from memfit.report._paths import PathLike, output_path

__all__ = ["svg_chart", "write_estimate_svg"]

_W = 960
_LEFT = 64
_RIGHT = 20
_TOP = 34
_BOTTOM = 340  # y of the x axis
_FONT = 11
_CHAR_PX = 6.3  # average width of one character at _FONT px, to fit and wrap labels


def _e(text: str) -> str:
    return escape(text, quote=True)


def _num(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


class _Scale:
    """Maps event indices and bytes to SVG coordinates."""

    def __init__(self, data: ChartData) -> None:
        self.span: int = max(data.length - 1, 1)
        self.y_top: int = max(data.y_top, 1)

    def x(self, index: float) -> float:
        fraction = min(max(float(index), 0.0), float(self.span)) / self.span
        return _LEFT + (_W - _LEFT - _RIGHT) * fraction

    def y(self, size: float) -> float:
        fraction = min(max(float(size), 0.0), float(self.y_top)) / self.y_top
        return _BOTTOM - (_BOTTOM - _TOP) * fraction


def _polyline(xs: list[int], ys: list[int], scale: _Scale, color: str, width: float) -> str:
    points = " ".join(f"{_num(scale.x(x))},{_num(scale.y(y))}" for x, y in zip(xs, ys, strict=True))
    return (
        f'<polyline points="{points}" fill="none" stroke="{color}" '
        f'stroke-width="{width}" stroke-linejoin="round" />'
    )


def _phases(data: ChartData, scale: _Scale) -> list[str]:
    out: list[str] = []
    for phase in data.phases:
        color = phase_color(phase.kind)
        x0, x1 = scale.x(phase.start), scale.x(phase.end)
        hover = (
            f"{phase.name}: events {phase.start:,} to {phase.end - 1:,}, "
            f"peak allocated {format_bytes(phase.peak_allocated)}"
        )
        out.append(f'<g class="phase"><title>{_e(hover)}</title>')
        out.append(
            f'<rect x="{_num(x0)}" y="{_TOP}" width="{_num(max(x1 - x0, 0.5))}" '
            f'height="{_BOTTOM - _TOP}" fill="{color}" fill-opacity="0.14" />'
        )
        out.append(
            f'<line x1="{_num(x0)}" y1="{_TOP}" x2="{_num(x0)}" y2="{_BOTTOM}" '
            f'stroke="{color}" stroke-opacity="0.6" />'
        )
        if len(phase.name) * _CHAR_PX + 8 < x1 - x0:
            out.append(
                f'<text x="{_num((x0 + x1) / 2)}" y="{_TOP + 14}" text-anchor="middle" '
                f'fill="#333">{_e(phase.name)}</text>'
            )
        out.append("</g>")
    return out


def _axes(data: ChartData, scale: _Scale) -> list[str]:
    out: list[str] = []
    for tick in data.y_ticks:
        y = _num(scale.y(tick * data.unit))
        out.append(f'<line x1="{_LEFT}" y1="{y}" x2="{_W - _RIGHT}" y2="{y}" stroke="#e0e0e0" />')
        out.append(
            f'<text x="{_LEFT - 6}" y="{y}" text-anchor="end" dominant-baseline="middle">'
            f"{_e(f'{tick:g}')}</text>"
        )
    for tick in nice_ticks(scale.span, target=8):
        x = _num(scale.x(tick))
        out.append(f'<line x1="{x}" y1="{_BOTTOM}" x2="{x}" y2="{_BOTTOM + 4}" stroke="#444" />')
        out.append(
            f'<text x="{x}" y="{_BOTTOM + 16}" text-anchor="middle">{_e(format_index(tick))}</text>'
        )
    out.append(
        f'<line x1="{_LEFT}" y1="{_BOTTOM}" x2="{_W - _RIGHT}" y2="{_BOTTOM}" stroke="#444" />'
    )
    out.append(f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{_BOTTOM}" stroke="#444" />')
    out.append(
        f'<text x="{(_LEFT + _W - _RIGHT) / 2}" y="{_BOTTOM + 34}" text-anchor="middle">'
        "allocator event</text>"
    )
    mid = (_TOP + _BOTTOM) / 2
    out.append(
        f'<text x="16" y="{mid}" text-anchor="middle" transform="rotate(-90 16 {mid})">'
        f"memory ({_e(unit_caption(data))})</text>"
    )
    return out


def _halo_text(x: float, y: float, text: str, color: str, attrs: str) -> str:
    """Text with a white outline under it, readable over the curves and bands.

    Drawn as two ``<text>`` elements rather than with ``paint-order``, which not every SVG
    renderer supports.
    """
    where = f'x="{_num(x)}" y="{_num(y)}" {attrs}'
    return (
        f'<text {where} fill="#fff" stroke="#fff" stroke-width="4" stroke-linejoin="round">'
        f'{_e(text)}</text><text {where} fill="{color}">{_e(text)}</text>'
    )


def _legend(data: ChartData) -> tuple[list[str], int]:
    """The legend rows under the x axis, and the y coordinate just below them."""
    entries: list[tuple[str, str, str]] = [  # (kind of swatch, colour, label)
        ("line", ALLOCATED_COLOR, "allocated (max_memory_allocated)"),
        ("line", RESERVED_COLOR, "reserved (max_memory_reserved)"),
    ]
    if data.capacity is not None:
        suffix = "" if data.capacity_on_chart else " (above the chart, not drawn)"
        entries.append(("dash", CAPACITY_COLOR, data.capacity_label + suffix))
    for kind in dict.fromkeys(phase.kind for phase in data.phases):
        entries.append(("band", phase_color(kind), kind))
    out: list[str] = []
    x, y = float(_LEFT), _BOTTOM + 58
    for swatch, color, label in entries:
        width = 26 + len(label) * _CHAR_PX + 18
        if x + width > _W - _RIGHT and x > _LEFT:
            x, y = float(_LEFT), y + 18
        if swatch == "band":
            out.append(
                f'<rect x="{_num(x)}" y="{y - 6}" width="18" height="10" fill="{color}" '
                'fill-opacity="0.4" />'
            )
        else:
            dash = ' stroke-dasharray="5 3"' if swatch == "dash" else ""
            out.append(
                f'<line x1="{_num(x)}" y1="{y - 1}" x2="{_num(x + 18)}" y2="{y - 1}" '
                f'stroke="{color}" stroke-width="2"{dash} />'
            )
        out.append(
            f'<text x="{_num(x + 24)}" y="{y}" dominant-baseline="middle">{_e(label)}</text>'
        )
        x += width
    return out, y + 14


def svg_chart(data: ChartData, *, standalone: bool = False) -> str:
    """The timeline chart as an ``<svg>`` element.

    ``standalone`` adds the XML namespace that a ``.svg`` file needs; inline in HTML it is
    not needed.
    """
    scale = _Scale(data)
    ns = ' xmlns="http://www.w3.org/2000/svg"' if standalone else ""
    title = f"Memory over the step: {data.title}"
    legend, height = _legend(data)
    out = [
        f'<svg{ns} viewBox="0 0 {_W} {height}" width="100%" role="img" '
        f'font-family="system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif" '
        f'font-size="{_FONT}" fill="#222">',
        f"<title>{_e(title)}</title>",
        f'<rect x="0" y="0" width="{_W}" height="{height}" fill="#ffffff" />',
        f'<text x="{_LEFT}" y="18" font-size="13" font-weight="600">{_e(title)}</text>',
    ]
    out += _phases(data, scale)
    out += _axes(data, scale)
    series = data.series
    if data.length:
        out.append(_polyline(series.x, series.reserved, scale, RESERVED_COLOR, 1.4))
        out.append(_polyline(series.x, series.allocated, scale, ALLOCATED_COLOR, 1.6))
    else:
        out.append(
            f'<text x="{(_LEFT + _W - _RIGHT) / 2}" y="{(_TOP + _BOTTOM) / 2}" '
            'text-anchor="middle" fill="#666">no timeline recorded</text>'
        )
    on_right = data.peak_index > 0.6 * scale.span
    if data.capacity is not None and data.capacity_on_chart:
        y = scale.y(data.capacity)
        label_x, anchor = (_LEFT + 6, "start") if on_right else (_W - _RIGHT - 6, "end")
        out.append(
            f"<g><title>{_e(data.capacity_label)}</title>"
            f'<line x1="{_LEFT}" y1="{_num(y)}" x2="{_W - _RIGHT}" y2="{_num(y)}" '
            f'stroke="{CAPACITY_COLOR}" stroke-width="1.5" stroke-dasharray="6 4" />'
            + _halo_text(
                label_x,
                y - 5,
                data.capacity_short,
                CAPACITY_COLOR,
                f'text-anchor="{anchor}"',
            )
            + "</g>"
        )
    if data.length:
        px, py = scale.x(data.peak_index), scale.y(data.peak_allocated)
        label = f"peak allocated {format_bytes(data.peak_allocated)}"
        hover = f"{label} at event {data.peak_index:,}"
        dx, anchor = (-9, "end") if on_right else (9, "start")
        out.append(
            f'<g class="peak"><title>{_e(hover)}</title>'
            f'<circle cx="{_num(px)}" cy="{_num(py)}" r="5" fill="{PEAK_COLOR}" '
            'stroke="#fff" stroke-width="1.5" />'
            + _halo_text(
                px + dx,
                py - 8,
                label,
                PEAK_COLOR,
                f'text-anchor="{anchor}" font-weight="600"',
            )
            + "</g>"
        )
    out += legend
    out.append("</svg>")
    return "\n".join(out)


def write_estimate_svg(
    estimate: Estimate, path: PathLike, *, max_points: int = DEFAULT_MAX_POINTS
) -> None:
    """Write the memory over the step of ``estimate`` to ``path`` as a standalone SVG.

    The same chart as the HTML report's, downsampled to ``max_points`` keeping each bucket's
    maximum. Needs no optional dependency.
    """
    target = output_path(path, "SVG plot", ".svg")
    document = '<?xml version="1.0" encoding="UTF-8"?>\n'
    document += svg_chart(chart_data(estimate, max_points), standalone=True) + "\n"
    target.write_text(document, encoding="utf-8")
