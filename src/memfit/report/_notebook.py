"""memfit's results as HTML in a Jupyter notebook: what their ``_repr_html_`` returns.

Each result shows the parts its self-contained page (or its terminal view) has, from the same
section builders, inside one ``<div class="memfit-report">``: a notebook inserts the HTML into
its own page, so there is no ``<html>`` or ``<body>``, and the page's CSS is scoped to that
``div`` (:func:`scope_css`) so that it styles nothing else in the notebook. The charts are the
pages' inline SVG. Nothing is loaded from anywhere: no script, link, font or image URL.

The data objects reach these renderers through ``memfit._display`` (they sit below ``report``
and may not import it): :data:`NOTEBOOK_RENDERERS` is what the top-level ``memfit`` package
hands that registry on the first display.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from memfit._display import HtmlKind, HtmlRenderer
from memfit.report._batch_html import BATCH_CSS, batch_size_sections
from memfit.report._html import ESTIMATE_CSS, estimate_sections
from memfit.report._plan_html import PLAN_CSS, plan_sections
from memfit.report._snapshot_html import SNAPSHOT_CSS, snapshot_sections
from memfit.report._validation_html import VALIDATION_CSS, validation_sections

if TYPE_CHECKING:  # the runtime and the planner import torch; rendering needs only fields
    from memfit.estimator import Estimate, Validation
    from memfit.planner import Plan
    from memfit.runtime import BatchSizeResult
    from memfit.snapshot import SnapshotReport

__all__ = [
    "NOTEBOOK_RENDERERS",
    "ROOT_CLASS",
    "batch_size_fragment",
    "estimate_fragment",
    "notebook_fragment",
    "plan_fragment",
    "scope_css",
    "snapshot_fragment",
    "validation_fragment",
]

ROOT_CLASS = "memfit-report"
# a page's frame, which becomes the fragment's own box
_FRAME_SELECTORS = {":root", "html", "body", "main"}
_RULE = re.compile(r"([^{}]+)\{([^{}]*)\}")
# after the page's rules: a smaller frame and headings, and tables laid out by their content
# (a notebook's own stylesheet fixes their layout and centres them)
_NOTEBOOK_CSS = f"""
.{ROOT_CLASS} {{ margin: 0; padding: 10px 14px; max-width: 1000px; background: #fff;
  color: #222; border: 1px solid #e3e3e3; border-radius: 4px; }}
.{ROOT_CLASS} h1 {{ font-size: 16px; margin: 0 0 6px; }}
.{ROOT_CLASS} h2 {{ font-size: 14px; margin: 16px 0 6px; }}
.{ROOT_CLASS} table {{ table-layout: auto; margin: 0; font-size: 13px; }}
.{ROOT_CLASS} figure {{ max-width: 880px; margin: 10px 0 0; }}
.{ROOT_CLASS} footer {{ margin-top: 12px; }}
"""


def scope_css(css: str, root: str = f".{ROOT_CLASS}") -> str:
    """``css`` with every rule limited to what is inside ``root``: ``h2`` becomes
    ``.memfit-report h2``; the page's frame (``:root``, ``body``, ``main``) becomes ``root``
    itself. Only plain rules are taken; an at-rule (``@media``...) is refused, as it would
    need its inner rules scoped too."""
    if "@" in css:
        raise ValueError("scope_css takes plain rules only, no at-rules (@media, @import...)")
    rules: list[str] = []
    for selectors, body in _RULE.findall(css):
        scoped = [
            root if s.strip() in _FRAME_SELECTORS else f"{root} {s.strip()}"
            for s in selectors.split(",")
        ]
        rules.append(f"{', '.join(dict.fromkeys(scoped))} {{ {' '.join(body.split())} }}")
    return "\n".join(rules)


def notebook_fragment(kind: str, css: str, sections: list[str]) -> str:
    """``sections`` in one ``<div>`` for a notebook, with ``css`` scoped to it."""
    style = scope_css(css) + _NOTEBOOK_CSS
    opening = f'<div class="{ROOT_CLASS} memfit-{kind}">'
    return "\n".join([opening, f"<style>\n{style}</style>", *sections, "</div>"])


def estimate_fragment(estimate: Estimate) -> str:
    """An estimate as the notebook shows it: its HTML page's parts (the workload, the verdict,
    the sizes, the timeline chart, the breakdown at the peak, the notes)."""
    return notebook_fragment("estimate", ESTIMATE_CSS, estimate_sections(estimate))


def plan_fragment(plan: Plan) -> str:
    """A plan as the notebook shows it: the answer, the ranked table, the notes."""
    return notebook_fragment("plan", PLAN_CSS, plan_sections(plan))


def batch_size_fragment(result: BatchSizeResult) -> str:
    """A batch-size search as the notebook shows it: the answer, the chart, the estimates."""
    return notebook_fragment("batch-size", BATCH_CSS, batch_size_sections(result))


def snapshot_fragment(report: SnapshotReport) -> str:
    """A snapshot report as the notebook shows it: its HTML page's parts (``memfit snapshot
    --html``)."""
    return notebook_fragment("snapshot", SNAPSHOT_CSS, snapshot_sections(report))


def validation_fragment(result: Validation) -> str:
    """An estimate beside its measurement as the notebook shows it (``memfit validate``)."""
    return notebook_fragment("validation", VALIDATION_CSS, validation_sections(result))


NOTEBOOK_RENDERERS: Mapping[HtmlKind, HtmlRenderer] = MappingProxyType(
    {
        "estimate": estimate_fragment,
        "validation": validation_fragment,
        "plan": plan_fragment,
        "batch_size": batch_size_fragment,
        "snapshot": snapshot_fragment,
    }
)
