"""A :class:`SnapshotReport` as one self-contained HTML page (``memfit snapshot --html``).

Everything is inline: CSS, the timeline (the same SVG chart as ``memfit estimate --plot``)
and the segment view drawn here as SVG. No script, no link, no
fetch: the page opens offline. Every string from the snapshot (paths, function names, which
the file's author controls) goes through :func:`html.escape`.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import cast

from memfit._series import DEFAULT_MAX_POINTS, downsample
from memfit._units import GiB, MiB, format_bytes
from memfit.allocator import SegmentInfo
from memfit.report._chart import ALLOCATED_COLOR, ChartData, PhaseSpan, nice_ticks
from memfit.report._html import PAGE_CSS, page_end, page_start
from memfit.report._paths import PathLike, output_path
from memfit.report._svg import svg_chart
from memfit.report._text import UNITS_CAPTION, format_share
from memfit.snapshot import SnapshotReport

__all__ = [
    "SNAPSHOT_CSS",
    "segment_svg",
    "snapshot_chart_data",
    "snapshot_html",
    "snapshot_sections",
    "write_snapshot_html",
]


def _seq(values: object) -> Sequence[int]:
    """A numpy array where the chart code takes a sequence (it converts with numpy anyway)."""
    return cast("Sequence[int]", values)


_FREE_COLOR = "#f4b66a"
_W = 960
_LABEL = 190  # px left of the bars
_ROW = 14
_MAX_SEGMENTS = 48

# the snapshot's page and its notebook view (memfit.report._notebook)
SNAPSHOT_CSS = (
    PAGE_CSS
    + """
h1 { font-size: 20px; margin: 0 0 8px; overflow-wrap: anywhere; }
dl.facts { display: flex; flex-wrap: wrap; gap: 4px 18px; margin: 0 0 12px; color: #444; }
dl.facts div { display: flex; gap: 6px; }
dl.facts dt { color: #777; }
dl.facts dd { margin: 0; font-weight: 600; }
p.verdict { font-size: 15px; font-weight: 700; padding: 8px 12px; border-radius: 4px;
            color: #1b5e20; background: #e8f5e9; }
p.check { padding: 6px 12px; border-radius: 4px; background: #f3f3f3; }
p.check.exact { background: #e8f5e9; }
table { border-collapse: collapse; width: 100%; }
th, td { padding: 4px 10px; border-bottom: 1px solid #eee; text-align: left;
         vertical-align: top; }
th { color: #555; font-weight: 600; border-bottom: 2px solid #ddd; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
          font-size: 13px; overflow-wrap: anywhere; }
td.good { color: #1b5e20; } td.bad { color: #b71c1c; }
tr.recorded td { font-weight: 700; }
figure { margin: 16px 0 0; }
figcaption, p.caption { color: #666; font-size: 12px; }
ul.notes li { margin: 3px 0; }
footer { margin-top: 32px; color: #888; font-size: 12px; }
"""
)


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _n(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def snapshot_chart_data(report: SnapshotReport, max_points: int = DEFAULT_MAX_POINTS) -> ChartData:
    """The timeline of ``report`` in the shape the SVG chart draws."""
    top = max(report.peak_allocated, report.peak_reserved)
    unit, unit_name = (GiB, "GiB") if top >= GiB else (MiB, "MiB")
    y_top = max(int(top * 1.15), unit)
    alloc = report.allocated
    phases = [
        PhaseSpan(p.name, p.kind, p.start, p.end, int(alloc[p.start : p.end].max()))
        for p in report.phases
        if 0 <= p.start < p.end <= len(alloc)
    ]
    return ChartData(
        title=report.source.rsplit("/", 1)[-1],
        length=report.events,
        series=downsample(_seq(report.allocated), _seq(report.reserved), max_points),
        phases=phases,
        peak_index=report.peak_allocated_event,
        peak_allocated=report.peak_allocated,
        peak_reserved=report.peak_reserved,
        capacity=None,
        capacity_label="",
        capacity_short="",
        capacity_on_chart=False,
        unit=unit,
        unit_name=unit_name,
        y_top=y_top,
        y_ticks=nice_ticks(y_top / unit),
    )


def _runs(segment: SegmentInfo, x0: float, width: float) -> list[str]:
    """The segment's blocks as rectangles, neighbours under a pixel merged (majority colour)."""
    out: list[str] = []
    scale = width / max(segment.total_size, 1)
    start, used, total = x0, 0, 0
    for block in segment.blocks:
        used += block.size if block.allocated else 0
        total += block.size
        end = x0 + (block.address + block.size - segment.address) * scale
        if end - start >= 1.0 or block is segment.blocks[-1]:
            color = ALLOCATED_COLOR if 2 * used >= total else _FREE_COLOR
            out.append(
                f'<rect x="{_n(start)}" y="0" width="{_n(max(end - start, 0.5))}" '
                f'height="{_ROW - 3}" fill="{color}" />'
            )
            start, used, total = end, 0, 0
    return out


def segment_svg(segments: tuple[SegmentInfo, ...]) -> str:
    """Segments as bars (largest first), their blocks coloured allocated or free."""
    ordered = sorted(segments, key=lambda s: (-s.total_size, s.address))
    shown, rest = ordered[:_MAX_SEGMENTS], ordered[_MAX_SEGMENTS:]
    biggest = max((s.total_size for s in shown), default=1)
    bar_w = _W - _LABEL - 10
    height = 30 + _ROW * (len(shown) + (1 if rest else 0)) + 24
    out = [
        f'<svg viewBox="0 0 {_W} {height}" width="100%" role="img" '
        'font-family="system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif" '
        'font-size="11" fill="#222">',
        "<title>Segments at the peak reserved memory</title>",
        f'<rect x="0" y="0" width="{_W}" height="{height}" fill="#fff" />',
    ]
    for i, seg in enumerate(shown):
        y = 24 + i * _ROW
        width = max(bar_w * seg.total_size / biggest, 2.0)
        share = format_share(seg.allocated_size, seg.total_size)
        kind = "expandable " if seg.is_expandable else ""
        hover = (
            f"{kind}{seg.pool} segment at {seg.address:#x}, stream {seg.stream}: "
            f"{format_bytes(seg.total_size)}, {format_bytes(seg.allocated_size)} allocated "
            f"({share}) in {sum(b.allocated for b in seg.blocks)} of {len(seg.blocks)} blocks"
        )
        out.append(f'<g transform="translate(0 {y})"><title>{_e(hover)}</title>')
        out.append(
            f'<text x="{_LABEL - 8}" y="{_ROW - 4}" text-anchor="end">'
            f"{_e(format_bytes(seg.total_size))} · {_e(share)}</text>"
        )
        out += _runs(seg, float(_LABEL), width)
        out.append("</g>")
    if rest:
        y = 24 + len(shown) * _ROW
        total = sum(s.total_size for s in rest)
        used = sum(s.allocated_size for s in rest)
        out.append(
            f'<text x="{_LABEL}" y="{y + _ROW - 4}" fill="#666">{_e(len(rest))} more segments: '
            f"{_e(format_bytes(total))}, {_e(format_share(used, total))} allocated</text>"
        )
    y = height - 10
    out.append(
        f'<rect x="{_LABEL}" y="{y - 8}" width="14" height="9" fill="{ALLOCATED_COLOR}" />'
        f'<text x="{_LABEL + 20}" y="{y}">allocated</text>'
        f'<rect x="{_LABEL + 100}" y="{y - 8}" width="14" height="9" fill="{_FREE_COLOR}" />'
        f'<text x="{_LABEL + 120}" y="{y}">free (cached, reserved)</text>'
    )
    out.append(
        f'<text x="{_LABEL}" y="14" fill="#555">bar length: segment size (largest '
        f"{_e(format_bytes(biggest))}); label: size · share allocated</text>"
    )
    out.append("</svg>")
    return "\n".join(out)


def _facts(report: SnapshotReport) -> str:
    items = [
        ("device", str(report.device)),
        ("trace entries", f"{report.entries:,}"),
        ("allocations and frees", f"{report.events:,}"),
        ("allocator", report.settings),
        ("starts", "empty" if report.complete else "mid-run (ring buffer wrapped)"),
    ]
    if report.duration_s is not None:
        items.append(("recorded", f"{report.duration_s:.2f} s"))
    body = "".join(f"<div><dt>{_e(k)}</dt><dd>{_e(v)}</dd></div>" for k, v in items)
    return f'<dl class="facts">{body}</dl>'


def _peaks(report: SnapshotReport) -> str:
    rows = [
        ("peak allocated", report.peak_allocated, report.peak_allocated_event,
         "torch.cuda.max_memory_allocated(), from the emulated replay"),
        ("peak requested", report.peak_requested, report.peak_requested_event,
         "bytes asked for by the live allocations, from the trace"),
        ("peak reserved", report.peak_reserved, report.peak_reserved_event,
         "torch.cuda.max_memory_reserved(), from the trace"),
    ]  # fmt: skip
    body = "".join(
        f"<tr><th scope='row'>{_e(label)}</th><td class='num'>{_e(format_bytes(size))}</td>"
        f"<td class='num'>event {event:,}</td><td>{_e(meaning)}</td></tr>"
        for label, size, event, meaning in rows
    )
    largest = report.largest_free_at_peak
    detail = f"; largest free block {format_bytes(largest)}" if largest is not None else ""
    body += (
        f"<tr><th scope='row'>unused reserved</th>"
        f"<td class='num'>{_e(format_bytes(report.fragmentation_at_peak))}</td>"
        f"<td class='num'>at the peak reserved</td><td>reserved minus allocated{_e(detail)}</td>"
        "</tr>"
    )
    return f"<table><tbody>{body}</tbody></table>"


def _what_if(report: SnapshotReport) -> str:
    if not report.what_if:
        return ""
    body = ""
    for w in report.what_if:
        if w.peak_reserved is None:
            cells = f"<td class='num'>-</td><td class='bad'>{_e(w.outcome or '')}</td>"
        else:
            saved = w.saved or 0
            share = format_share(saved, report.replay.emulated_peak_reserved)
            css = "good" if saved > 0 else ("bad" if saved < 0 else "")
            text = "(recorded)" if w.recorded else f"{format_bytes(saved)} ({share})"
            cells = (
                f"<td class='num'>{_e(format_bytes(w.peak_reserved))}</td>"
                f"<td class='num {css}'>{_e(text)}</td>"
            )
        css_row = " class='recorded'" if w.recorded else ""
        body += (
            f"<tr{css_row}><td class='code'>{_e(w.label)}</td>{cells}"
            f"<td>{_e(w.note or '')}</td></tr>"
        )
    return (
        "<h2>What if: the same allocations and frees under other allocator settings</h2>"
        "<table><thead><tr><th>PYTORCH_CUDA_ALLOC_CONF</th><th class='num'>peak reserved</th>"
        f"<th class='num'>saves</th><th>note</th></tr></thead><tbody>{body}</tbody></table>"
        f'<p class="verdict">{_e(report.recommendation)}</p>'
    )


def _blocks(report: SnapshotReport) -> str:
    if not report.top_blocks:
        return ""
    body = "".join(
        f"<tr><td class='num'>{_e(format_bytes(b.size))}</td>"
        f"<td class='num'>{_e(format_share(b.size, report.peak_allocated))}</td>"
        f"<td class='code'>{b.address:#x}</td>"
        f"<td class='num'>{'before the trace' if b.event is None else f'event {b.event:,}'}</td>"
        f"<td class='code'>{_e(b.site or '-')}</td></tr>"
        for b in report.top_blocks
    )
    return (
        f"<h2>Largest live blocks at the peak allocated (event "
        f"{report.peak_allocated_event:,})</h2><table><thead><tr><th class='num'>size</th>"
        "<th class='num'>of peak</th><th>address</th><th class='num'>allocated at</th>"
        f"<th>site</th></tr></thead><tbody>{body}</tbody></table>"
    )


def _sites(report: SnapshotReport) -> str:
    if report.frames_note is not None:
        return f"<h2>Allocation sites</h2><p>{_e(report.frames_note)}</p>"
    body = "".join(
        f"<tr><td class='code'>{_e(s.site)}</td><td class='num'>{_e(format_bytes(s.size))}</td>"
        f"<td class='num'>{s.count:,}</td></tr>"
        for s in report.top_sites
    )
    return (
        "<h2>Top allocation sites at the peak allocated</h2><table><thead><tr>"
        "<th>site (first frame outside torch)</th><th class='num'>live</th>"
        f"<th class='num'>blocks</th></tr></thead><tbody>{body}</tbody></table>"
    )


def _notes(report: SnapshotReport) -> str:
    items = [
        f"{len(report.ooms)} out-of-memory entries; the first asked for "
        f"{format_bytes(report.ooms[0].size)} with {format_bytes(report.ooms[0].device_free)} "
        "free on the device"
    ] if report.ooms else []  # fmt: skip
    items += list(report.notes)
    if not items:
        return ""
    body = "".join(f"<li>{_e(n)}</li>" for n in items)
    return f'<h2>Notes</h2><ul class="notes">{body}</ul>'


def snapshot_sections(report: SnapshotReport, *, max_points: int = DEFAULT_MAX_POINTS) -> list[str]:
    """What the page for ``report`` holds inside its ``<main>``, a part a string (empty ones
    left out): the same in a file and in a notebook."""
    name = report.source.rsplit("/", 1)[-1]
    exact = " exact" if report.replay.exact else ""
    timeline = (
        svg_chart(snapshot_chart_data(report, max_points))
        if report.events
        else "<p>The trace has no allocations.</p>"
    )
    fragmentation = ""
    if len(report.fragmentation_samples):
        worst = max(report.fragmentation_samples, key=lambda s: s[1])
        fragmentation = (
            f'<p class="caption">Unused reserved memory (reserved minus allocated) is highest at '
            f"event {worst[0]:,} among {len(report.fragmentation_samples)} samples: "
            f"{_e(format_bytes(worst[1]))}, largest free block {_e(format_bytes(worst[2]))}.</p>"
        )
    segments = (
        segment_svg(report.segments_at_peak)
        if report.segments_at_peak
        else "<p>No segments at the peak.</p>"
    )
    parts = [
        f"<h1>memfit snapshot: {_e(name)}</h1>",
        _facts(report),
        _peaks(report),
        f'<p class="check{exact}"><strong>Replay check:</strong> {_e(report.replay.message)}</p>',
        '<figure class="timeline">',
        timeline,
        "<figcaption>Allocated (emulated, torch's allocated_bytes) and reserved (from the "
        "trace) memory after each allocation or free, downsampled keeping each bucket's "
        "maximum so the peaks are exact.</figcaption>",
        "</figure>",
        fragmentation,
        f"<h2>Segments at the peak reserved (event {report.peak_reserved_event:,})</h2>",
        '<figure class="segments">',
        segments,
        "<figcaption>From the replay with the recorded settings. Hover a segment for its "
        "address, pool and blocks.</figcaption>",
        "</figure>",
        _what_if(report),
        _blocks(report),
        _sites(report),
        _notes(report),
        f"<footer>Generated by memfit from {_e(report.source)}. {_e(UNITS_CAPTION)}.</footer>",
    ]
    return [part for part in parts if part]


def snapshot_html(report: SnapshotReport, *, max_points: int = DEFAULT_MAX_POINTS) -> str:
    """The full HTML page for ``report``, as a string."""
    title = f"memfit snapshot: {report.source.rsplit('/', 1)[-1]}"
    sections = snapshot_sections(report, max_points=max_points)
    return "\n".join([*page_start(title, SNAPSHOT_CSS), *sections, *page_end()]) + "\n"


def write_snapshot_html(
    report: SnapshotReport, path: PathLike, *, max_points: int = DEFAULT_MAX_POINTS
) -> None:
    """Write ``report`` to ``path`` as one self-contained, offline HTML page."""
    target = output_path(path, "HTML report", ".html")
    target.write_text(snapshot_html(report, max_points=max_points), encoding="utf-8")
