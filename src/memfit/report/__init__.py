"""Render memfit's results for people: terminal (rich), PNG, SVG, HTML and Markdown.

The only renderer: the other packages keep data and ``to_dict()``. Names follow one scheme,
``render_<thing>`` prints with rich, ``<thing>_html`` / ``<thing>_markdown`` return the text,
``write_<thing>_<format>`` writes a file:

* an estimate (:class:`memfit.Estimate`): ``render_estimate``, ``estimate_html``,
  ``write_estimate_html`` / ``_png`` (needs matplotlib, ``memfit[plot]``) / ``_svg``, and
  ``write_estimate_plot``, whose path's suffix picks the format (``PLOT_SUFFIXES``);
* a snapshot report (:class:`memfit.snapshot.SnapshotReport`): ``render_snapshot``,
  ``snapshot_html``, ``write_snapshot_html``;
* an out-of-memory report (:class:`memfit.oom.OOMDiagnosis`): ``oom_markdown``;
* a batch-size search (:class:`memfit.BatchSizeResult`): ``render_batch_size``,
  ``batch_size_svg``, ``batch_size_html``, ``write_batch_size_png``, and
  ``write_batch_size_plot``, whose path's suffix picks the format (``BATCH_PLOT_SUFFIXES``);
* a plan (:class:`memfit.planner.Plan`, ``memfit plan``): ``render_plan`` (or
  ``plan_renderable`` to place it yourself), ``plan_markdown``, ``write_plan_png``;
* any plot's path, checked before the work: ``check_plot_path``;
* a serving capacity (:class:`memfit.estimator.ServingCapacity`, ``memfit serve``):
  ``render_serving``, ``write_serving_png``;
* an estimate beside a measurement (:class:`memfit.estimator.Validation`):
  ``render_validation``;
* a step-time calibration (``memfit calibrate``): ``render_calibration``, and those saved on
  this machine: ``render_saved_calibrations``;
* monitor samples (``memfit watch``): ``render_sample``, ``watch_frame`` with a
  ``WatchHistory``, and ``SampleLog`` to log them as CSV or JSON lines;
* the bundled models (``memfit estimate --list-models``): ``render_catalog``;
* any of an estimate, a validation, a plan, a batch-size search or a snapshot report in a
  Jupyter notebook: ``NOTEBOOK_RENDERERS``, what their ``_repr_html_`` returns (an HTML
  fragment with the charts inline as SVG and its CSS scoped to it).

HTML pages are self-contained and work offline. Sizes are always shown in binary units
(GiB = 2^30 bytes).
"""

from __future__ import annotations

from memfit.report._batch_png import BatchSearch, batch_size_plot_path, write_batch_size_png
from memfit.report._batch_size import render_batch_size
from memfit.report._batch_svg import (
    BATCH_PLOT_SUFFIXES,
    batch_size_html,
    batch_size_svg,
    write_batch_size_plot,
)
from memfit.report._calibration import render_calibration, render_saved_calibrations
from memfit.report._catalog import render_catalog
from memfit.report._console import render_estimate
from memfit.report._doctor import render_doctor
from memfit.report._html import estimate_html, write_estimate_html
from memfit.report._notebook import NOTEBOOK_RENDERERS
from memfit.report._oom import oom_markdown
from memfit.report._plan_console import plan_renderable, render_plan
from memfit.report._plan_markdown import plan_markdown
from memfit.report._plan_png import write_plan_png
from memfit.report._plot_path import check_plot_path
from memfit.report._png import write_estimate_png
from memfit.report._serving import render_serving
from memfit.report._serving_png import write_serving_png
from memfit.report._snapshot_console import render_snapshot
from memfit.report._snapshot_html import snapshot_html, write_snapshot_html
from memfit.report._svg import write_estimate_svg
from memfit.report._validation import render_validation
from memfit.report._watch import NA, WatchHistory, render_sample, watch_frame
from memfit.report._watch_log import LOG_COLUMNS, LOG_SUFFIXES, SampleLog, log_rows
from memfit.report._write import PLOT_SUFFIXES, write_estimate_plot

__all__ = [
    "BATCH_PLOT_SUFFIXES",
    "LOG_COLUMNS",
    "LOG_SUFFIXES",
    "NA",
    "NOTEBOOK_RENDERERS",
    "PLOT_SUFFIXES",
    "BatchSearch",
    "SampleLog",
    "WatchHistory",
    "batch_size_html",
    "batch_size_plot_path",
    "batch_size_svg",
    "check_plot_path",
    "estimate_html",
    "log_rows",
    "oom_markdown",
    "plan_markdown",
    "plan_renderable",
    "render_batch_size",
    "render_calibration",
    "render_catalog",
    "render_doctor",
    "render_estimate",
    "render_plan",
    "render_sample",
    "render_saved_calibrations",
    "render_serving",
    "render_snapshot",
    "render_validation",
    "snapshot_html",
    "watch_frame",
    "write_batch_size_plot",
    "write_batch_size_png",
    "write_estimate_html",
    "write_estimate_plot",
    "write_estimate_png",
    "write_estimate_svg",
    "write_plan_png",
    "write_serving_png",
    "write_snapshot_html",
]
