"""Draw a batch-size search as SVG, or as an HTML page with the SVG and the table inline.

The same chart as :mod:`memfit.report._batch_png` (memory against batch size, with and without
memory to spare, the GPU's memory, the budget and the answer), written by hand so that it
needs no matplotlib; :func:`write_batch_size_plot` picks the format from the path's suffix,
as ``memfit estimate --plot`` does for an estimate.
"""

from __future__ import annotations

from html import escape

from memfit._units import GiB, format_bytes
from memfit.report._batch_png import _TRIAL_COLORS, BatchSearch, write_batch_size_png
from memfit.report._chart import CAPACITY_COLOR, PEAK_COLOR, RESERVED_COLOR, nice_ticks
from memfit.report._html import PAGE_CSS, page_end, page_start
from memfit.report._paths import PathLike
from memfit.report._plot_path import check_plot_path

__all__ = [
    "BATCH_PLOT_SUFFIXES",
    "batch_size_html",
    "batch_size_svg",
    "write_batch_size_plot",
]

BATCH_PLOT_SUFFIXES: tuple[str, ...] = (".png", ".svg", ".html", ".htm")
_W, _H, _LEFT, _RIGHT, _TOP, _BOTTOM = 760, 400, 64, 20, 40, 340
_CSS = PAGE_CSS + (
    "table { border-collapse: collapse; } th, td { padding: 3px 10px; text-align: right; "
    "border-bottom: 1px solid #eee; }"
)


def _e(text: str) -> str:
    return escape(text, quote=True)


def batch_size_svg(result: BatchSearch, *, standalone: bool = False) -> str:
    """The search behind ``result`` as an ``<svg>`` element (``standalone`` for a file)."""
    points = sorted(result.estimates, key=lambda p: p.batch_size)
    spare = [(p.batch_size, p.peak_reserved + p.context) for p in points]
    need = [(p.batch_size, p.total) for p in points]
    x_top = max([result.batch_size, *(b for b, _ in spare)], default=1) or 1
    y_top = max([result.gpu_total, *(n for _, n in spare), *(n for _, n in need)]) * 1.05 or 1

    def x(batch: float) -> float:
        return _LEFT + (_W - _LEFT - _RIGHT) * batch / x_top

    def y(size: float) -> float:
        return _BOTTOM - (_BOTTOM - _TOP) * size / y_top

    def line(pts: list[tuple[int, int]], color: str, dash: str) -> str:
        xy = " ".join(f"{x(b):.1f},{y(n):.1f}" for b, n in pts)
        return f'<polyline points="{xy}" fill="none" stroke="{color}" stroke-width="2"{dash} />'

    how = "confirmed on the GPU" if result.confirmed else "estimated"
    title = f"Largest batch: {result.batch_size} ({how}) on {result.gpu}"
    ns = ' xmlns="http://www.w3.org/2000/svg"' if standalone else ""
    out = [
        f'<svg{ns} viewBox="0 0 {_W} {_H}" width="100%" role="img" font-size="11" '
        'font-family="system-ui, sans-serif" fill="#222">',
        f"<title>{_e(title)}</title>",
        f'<rect width="{_W}" height="{_H}" fill="#fff" />',
        f'<text x="{_LEFT}" y="20" font-size="13" font-weight="600">{_e(title)}</text>',
    ]
    for tick in nice_ticks(y_top / GiB):
        ty = y(tick * GiB)
        out.append(
            f'<line x1="{_LEFT}" y1="{ty:.1f}" x2="{_W - _RIGHT}" y2="{ty:.1f}" stroke="#e0e0e0" />'
        )
        out.append(f'<text x="{_LEFT - 6}" y="{ty:.1f}" text-anchor="end">{tick:g}</text>')
    for tick in nice_ticks(x_top, target=8):
        out.append(
            f'<text x="{x(tick):.1f}" y="{_BOTTOM + 16}" text-anchor="middle">{tick:g}</text>'
        )
    for size, dash, label in (
        (result.gpu_total, "", "GPU memory"),
        (
            result.budget,
            ' stroke-dasharray="3 3"',
            f"budget (margin {format_bytes(result.margin)})",
        ),
    ):
        out.append(
            f'<line x1="{_LEFT}" y1="{y(size):.1f}" x2="{_W - _RIGHT}" '
            f'y2="{y(size):.1f}" stroke="{CAPACITY_COLOR}"{dash} />'
        )
        out.append(
            f'<text x="{_W - _RIGHT - 4}" y="{y(size) - 4:.1f}" text-anchor="end" '
            f'fill="{CAPACITY_COLOR}">{_e(label)}</text>'
        )
    out.append(line(spare, RESERVED_COLOR, ""))
    out.append(line(need, PEAK_COLOR, ' stroke-dasharray="6 4"'))
    bx = x(result.batch_size)
    out.append(f'<line x1="{bx:.1f}" y1="{_TOP}" x2="{bx:.1f}" y2="{_BOTTOM}" stroke="#555" />')
    for t in result.trials:
        context = points[0].context if points else 0
        out.append(
            f'<circle cx="{x(t.batch_size):.1f}" cy="{y(t.peak_reserved + context):.1f}" '
            f'r="5" fill="{_TRIAL_COLORS.get(t.outcome, "#555555")}">'
            f"<title>GPU trial: {_e(t.outcome)}</title></circle>"
        )
    out += [
        f'<text x="{(_LEFT + _W) / 2}" y="{_BOTTOM + 34}" text-anchor="middle">batch size '
        f'· <tspan fill="{RESERVED_COLOR}">peak reserved + context</tspan> · '
        f'<tspan fill="{PEAK_COLOR}">runs in (cache freed when full) + context</tspan> '
        "· GiB (2^30 bytes)</text>",
        "</svg>",
    ]
    return "\n".join(out)


def batch_size_html(result: BatchSearch, model: str = "") -> str:
    """A self-contained page: the chart and the table of every estimate the search made."""
    title = f"memfit: largest batch of {model or 'the workload'} on {result.gpu}"
    rows = "".join(
        f"<tr><td>{p.batch_size}</td><td>{_e(format_bytes(p.peak_reserved))}</td>"
        f"<td>{_e(format_bytes(p.total))}</td>"
        f"<td>{'yes' if p.total <= result.budget else 'no'}</td></tr>"
        for p in sorted(result.estimates, key=lambda p: p.batch_size)
    )
    parts = [
        *page_start(title, _CSS),
        f"<h1>{_e(title)}</h1>",
        f"<p>Largest batch size: <b>{result.batch_size}</b> · budget "
        f"{_e(format_bytes(result.budget))} = {_e(format_bytes(result.gpu_total))} less a "
        f"margin of {_e(format_bytes(result.margin))}</p>",
        batch_size_svg(result),
        "<h2>Estimates</h2><table><tr><th>batch size</th><th>peak reserved</th>"
        f"<th>with CUDA context</th><th>fits</th></tr>{rows}</table>",
        *page_end(),
    ]
    return "\n".join(parts) + "\n"


def write_batch_size_plot(result: BatchSearch, path: PathLike) -> None:
    """Write the search behind ``result`` to ``path`` in the format its suffix names:
    ``.png`` (matplotlib, ``memfit[plot]``), ``.svg`` or ``.html``/``.htm`` (no dependency)."""
    target = check_plot_path(path, BATCH_PLOT_SUFFIXES, "batch-size plot")
    suffix = target.suffix.lower()
    if suffix == ".png":
        write_batch_size_png(result, target)
    elif suffix == ".svg":
        target.write_text(batch_size_svg(result, standalone=True) + "\n", encoding="utf-8")
    else:
        target.write_text(batch_size_html(result), encoding="utf-8")
