"""Render an :class:`~memfit.estimator._result.Estimate` for people: terminal, PNG, SVG and HTML.

``render_estimate`` prints it with rich. ``write_plot`` writes the memory timeline to a file
whose suffix picks the format: ``.png`` (needs matplotlib, ``memfit[plot]``), ``.svg``, or
``.html`` (one self-contained page with every table and the chart inline, works offline).
``write_batch_size_png`` draws a batch-size search (``memfit estimate --max-batch-size``).
Sizes are always shown in binary units (GiB = 2^30 bytes).
"""

from __future__ import annotations

from memfit.report._batch_png import write_batch_size_png
from memfit.report._console import render_estimate
from memfit.report._html import html_report, write_html
from memfit.report._png import write_png
from memfit.report._svg import write_svg
from memfit.report._write import PLOT_SUFFIXES, write_plot

__all__ = [
    "PLOT_SUFFIXES",
    "html_report",
    "render_estimate",
    "write_batch_size_png",
    "write_html",
    "write_plot",
    "write_png",
    "write_svg",
]
