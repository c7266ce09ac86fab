"""Write an estimate as one self-contained HTML page.

The page carries everything inline (CSS and an SVG chart drawn in Python), fetches nothing
and links nowhere, so it can be mailed, attached to an issue or opened offline. Every string
from the estimate is escaped with :func:`html.escape`: module and model names come from user
code and may contain anything, ``<script>`` included.
"""

from __future__ import annotations

from html import escape

from memfit._units import format_bytes
from memfit.estimator import Estimate
from memfit.report._chart import DEFAULT_MAX_POINTS, chart_data
from memfit.report._paths import PathLike, output_path
from memfit.report._svg import svg_chart
from memfit.report._text import (
    MEMORY_ROWS,
    UNITS_CAPTION,
    category_rows,
    format_share,
    memory_values,
    module_rows,
    peak_fields,
    shorten_middle,
    stated_fields,
    verdict_text,
    version_fields,
    workload_fields,
    workload_title,
)

__all__ = [
    "ESTIMATE_CSS",
    "PAGE_CSS",
    "estimate_html",
    "estimate_sections",
    "page_end",
    "page_start",
    "write_estimate_html",
]

_MODULE_ROWS = 10
_MODULE_WIDTH = 90

# the page frame shared with the snapshot report (memfit.snapshot)
PAGE_CSS = """
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif;
       color: #222; background: #fafafa; margin: 0; }
main { max-width: 1000px; margin: 0 auto; padding: 24px 20px 40px; background: #fff; }
h2 { font-size: 16px; margin: 28px 0 8px; }
"""

# the estimate's page and its notebook view (memfit.report._notebook)
ESTIMATE_CSS = (
    PAGE_CSS
    + """
h1 { font-size: 20px; margin: 0 0 8px; }
dl.workload { display: flex; flex-wrap: wrap; gap: 4px 18px; margin: 0 0 12px; color: #444; }
dl.workload div { display: flex; gap: 6px; }
dl.workload dt { color: #777; }
dl.workload dd { margin: 0; font-weight: 600; }
p.verdict { font-size: 16px; font-weight: 700; padding: 8px 12px; border-radius: 4px; }
p.verdict.fits { color: #1b5e20; background: #e8f5e9; }
p.verdict.short { color: #b71c1c; background: #ffebee; }
p.verdict.tight { color: #8a5a00; background: #fff8e1; }
table { border-collapse: collapse; width: 100%; }
th, td { padding: 4px 10px; border-bottom: 1px solid #eee; text-align: left;
         vertical-align: top; }
th { color: #555; font-weight: 600; border-bottom: 2px solid #ddd; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.meaning { color: #666; }
tr.total td { font-weight: 700; border-top: 2px solid #ddd; }
tr.rest td { color: #777; }
td.module { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
            font-size: 13px; overflow-wrap: anywhere; }
td.bar { width: 30%; }
div.bar { height: 12px; background: #4c9be8; border-radius: 2px; }
figure { margin: 16px 0 0; }
figcaption, p.caption { color: #666; font-size: 12px; }
ul.notes li { margin: 3px 0; }
footer { margin-top: 32px; color: #888; font-size: 12px; }
"""
)


def _e(text: str) -> str:
    return escape(text, quote=True)


def _workload(estimate: Estimate) -> str:
    items = "".join(
        f"<div><dt>{_e(label)}</dt><dd>{_e(value)}</dd></div>"
        for label, value in stated_fields(estimate, workload_fields(estimate.workload))
    )
    return f'<dl class="workload">{items}</dl>'


def _for_versions(estimate: Estimate) -> str:
    """`` for torch 2.14.1, transformers 5.24.0``: the versions the estimate assumed."""
    named = ", ".join(f"{name} {version}" for name, version in version_fields(estimate.versions))
    return f" for {named}" if named else ""


def _verdict(estimate: Estimate) -> str:
    verdict = verdict_text(estimate)
    if verdict is None:
        return ""
    css = "tight" if verdict.tight else "fits" if verdict.fits else "short"
    return f'<p class="verdict {css}">{_e(verdict.text[0].upper() + verdict.text[1:])}</p>'


def _memory(estimate: Estimate) -> str:
    rows = "".join(
        f'<tr><th scope="row">{_e(label)}</th><td class="num">{_e(format_bytes(value))}</td>'
        f'<td class="meaning">{_e(meaning)}</td></tr>'
        for (label, meaning), value in zip(MEMORY_ROWS, memory_values(estimate), strict=True)
    )
    return f"<table><tbody>{rows}</tbody></table>"


def _categories(estimate: Estimate) -> str:
    rows, total = category_rows(estimate)
    body = "".join(
        f"<tr><td>{_e(row.label)}</td><td class='num'>{_e(format_bytes(row.size))}</td>"
        f"<td class='num'>{100 * row.share:.1f}%</td>"
        f"<td class='bar'><div class='bar' style='width:{100 * row.share:.1f}%'></div></td></tr>"
        for row in rows
    )
    body += (
        f"<tr class='total'><td>live at the peak</td>"
        f"<td class='num'>{_e(format_bytes(total))}</td><td></td><td></td></tr>"
    )
    return (
        "<table><thead><tr><th>category</th><th class='num'>size</th><th class='num'>share</th>"
        f"<th></th></tr></thead><tbody>{body}</tbody></table>"
    )


def _modules(estimate: Estimate) -> str:
    modules = module_rows(estimate, _MODULE_ROWS)
    if not modules.rows:
        return ""
    body = ""
    for name, size in modules.rows:
        label = shorten_middle(name, _MODULE_WIDTH) if name else "(top level)"
        body += (
            f"<tr><td class='module' title='{_e(name)}'>{_e(label)}</td>"
            f"<td class='num'>{_e(format_bytes(size))}</td>"
            f"<td class='num'>{_e(format_share(size, estimate.peak_allocated))}</td></tr>"
        )
    if modules.rest_count:
        body += (
            f"<tr class='rest'><td>… {modules.rest_count} more</td>"
            f"<td class='num'>{_e(format_bytes(modules.rest_size))}</td>"
            f"<td class='num'>{_e(format_share(modules.rest_size, estimate.peak_allocated))}"
            "</td></tr>"
        )
    return (
        "<h2>Top modules at the peak</h2><table><thead><tr><th>module</th>"
        "<th class='num'>size</th><th class='num'>of peak allocated</th></tr></thead>"
        f"<tbody>{body}</tbody></table>"
    )


def _peak(estimate: Estimate) -> str:
    items = "".join(
        f"<div><dt>{_e(label)}</dt><dd>{_e(value)}</dd></div>"
        for label, value in peak_fields(estimate)
    )
    return f'<dl class="workload">{items}</dl>'


def _notes(estimate: Estimate) -> str:
    if not estimate.notes:
        return ""
    items = "".join(f"<li>{_e(note)}</li>" for note in estimate.notes)
    return f'<h2>Notes</h2><ul class="notes">{items}</ul>'


def page_start(title: str, css: str) -> list[str]:
    """The lines that open a self-contained page, up to its ``<main>``: no external resource."""
    return [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title>",
        f"<style>{css}</style>",
        "</head>",
        "<body>",
        "<main>",
    ]


def page_end() -> list[str]:
    """The lines that close what :func:`page_start` opened."""
    return ["</main>", "</body>", "</html>"]


def estimate_sections(estimate: Estimate, *, max_points: int = DEFAULT_MAX_POINTS) -> list[str]:
    """What the page for ``estimate`` holds inside its ``<main>``, a part a string (empty
    ones left out): the same in a file and in a notebook."""
    chart = svg_chart(chart_data(estimate, max_points))
    parts = [
        f"<h1>memfit estimate: {_e(estimate.workload.model)}</h1>",
        _workload(estimate),
        _verdict(estimate),
        _memory(estimate),
        '<figure class="timeline">',
        chart,
        "<figcaption>Memory after each allocator event over the traced step, downsampled "
        "keeping each bucket's maximum so the peak is exact. Hover a phase for its range and "
        "peak.</figcaption>",
        "</figure>",
        "<h2>At the peak</h2>",
        _categories(estimate),
        f'<p class="caption">{_e(UNITS_CAPTION)}</p>',
        _modules(estimate),
        "<h2>Where the peak happens</h2>",
        _peak(estimate),
        _notes(estimate),
        f"<footer>Generated by memfit{_e(_for_versions(estimate))}. {_e(UNITS_CAPTION)}.</footer>",
    ]
    return [part for part in parts if part]


def estimate_html(estimate: Estimate, *, max_points: int = DEFAULT_MAX_POINTS) -> str:
    """The full HTML page for ``estimate``, as a string."""
    title = f"memfit: {workload_title(estimate.workload)}"
    sections = estimate_sections(estimate, max_points=max_points)
    return "\n".join([*page_start(title, ESTIMATE_CSS), *sections, *page_end()]) + "\n"


def write_estimate_html(
    estimate: Estimate, path: PathLike, *, max_points: int = DEFAULT_MAX_POINTS
) -> None:
    """Write ``estimate`` to ``path`` as one self-contained, offline HTML page.

    The page has the workload, the fit verdict, the headline sizes, the timeline as an inline
    SVG chart, the breakdown by category and module at the peak, and the notes.
    """
    target = output_path(path, "HTML report", ".html")
    target.write_text(estimate_html(estimate, max_points=max_points), encoding="utf-8")
