"""A batch-size search (:class:`memfit.BatchSizeResult`) as HTML, for a notebook: what
``memfit estimate --max-batch-size`` prints (:mod:`memfit.report._batch_size`), with the
search's chart (:func:`memfit.report.batch_size_svg`) inline.

The answer first (the batch size, its budget, what the search cost), then the chart, the
table of every estimate and the GPU trials.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from memfit._units import format_bytes
from memfit.report._batch_svg import batch_size_svg
from memfit.report._html import PAGE_CSS
from memfit.report._text import UNITS_CAPTION

if TYPE_CHECKING:  # the runtime imports torch; rendering a result needs only its fields
    from memfit.runtime import BatchSizeResult

__all__ = ["BATCH_CSS", "batch_size_sections"]

BATCH_CSS = (
    PAGE_CSS
    + """
h1 { font-size: 20px; margin: 0 0 8px; }
p.verdict { font-size: 15px; font-weight: 700; padding: 8px 12px; border-radius: 4px;
            color: #1b5e20; background: #e8f5e9; }
p.warn { color: #8a5a00; background: #fff8e1; padding: 6px 12px; border-radius: 4px; }
table { border-collapse: collapse; }
th, td { padding: 3px 12px; border-bottom: 1px solid #eee; text-align: right;
         font-variant-numeric: tabular-nums; }
th { color: #555; font-weight: 600; border-bottom: 2px solid #ddd; }
tr.answer td { font-weight: 700; }
figure { margin: 12px 0 0; }
p.caption, figcaption { color: #666; font-size: 12px; }
"""
)


def _e(text: str) -> str:
    return escape(text, quote=True)


def _answer(result: BatchSizeResult) -> str:
    limit = " (the max_batch limit)" if result.limited_by == "max_batch" else ""
    how = f", confirmed in {len(result.trials)} GPU trial(s)" if result.confirmed else ""
    return (
        f'<p class="verdict">Largest batch size: {result.batch_size}{_e(limit + how)}</p>'
        f"<p>Budget {_e(format_bytes(result.budget))} = {_e(format_bytes(result.gpu_total))} "
        f"less a margin of {_e(format_bytes(result.margin))} · {len(result.estimates)} "
        f"estimates in {result.estimate_seconds:.1f} s · about "
        f"{_e(format_bytes(result.per_sample))} a sample</p>"
    )


def _estimates(result: BatchSizeResult) -> str:
    body = "".join(
        ("<tr class='answer'>" if p.batch_size == result.batch_size else "<tr>")
        + f"<td>{p.batch_size}</td><td>{_e(format_bytes(p.peak_reserved))}</td>"
        f"<td>{_e(format_bytes(p.need))}</td><td>{_e(format_bytes(p.total))}</td>"
        f"<td>{'yes' if p.total <= result.budget else 'no'}</td></tr>"
        for p in sorted(result.estimates, key=lambda p: p.batch_size)
    )
    return (
        f"<h2>Batch sizes estimated on {_e(result.gpu)}</h2><table><thead><tr>"
        "<th>batch size</th><th>peak reserved</th><th>runs in</th><th>with CUDA context</th>"
        f"<th>fits</th></tr></thead><tbody>{body}</tbody></table>"
        '<p class="caption">peak reserved: with memory to spare; runs in: the least the step '
        "needs, as the caching allocator frees its cache and retries when the GPU is full. "
        f"{_e(UNITS_CAPTION)}</p>"
    )


def _trials(result: BatchSizeResult) -> str:
    if not result.trials:
        return ""
    items = "".join(
        f"<li>batch {t.batch_size}: {_e(t.outcome)}, measured peak reserved "
        f"{_e(format_bytes(t.peak_reserved))} (predicted "
        f"{_e(format_bytes(t.predicted_reserved))}), {t.seconds:.1f} s</li>"
        for t in result.trials
    )
    return f"<h2>GPU trials</h2><ul>{items}</ul>"


def batch_size_sections(result: BatchSizeResult) -> list[str]:
    """``result`` as HTML parts: a heading, the answer, the note on a batch that fits only
    by the allocator freeing its cache, the chart, the estimates and the GPU trials."""
    note = result.pressure_note()
    parts = [
        f"<h1>memfit: largest batch on {_e(result.gpu)}</h1>",
        _answer(result),
        f'<p class="warn">Note: batch {result.batch_size} {_e(note)}.</p>' if note else "",
        f"<figure>{batch_size_svg(result)}</figure>",
        _estimates(result),
        _trials(result),
    ]
    return [part for part in parts if part]
