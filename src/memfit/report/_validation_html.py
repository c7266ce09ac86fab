"""``memfit validate``'s tables as HTML, for a notebook: estimate beside measurement with the
error of each, then the library versions the estimate assumed beside the GPU host's, those
that differ marked (the same rows as :mod:`memfit.report._validation`)."""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from memfit._units import format_bytes
from memfit.report._html import PAGE_CSS
from memfit.report._text import UNITS_CAPTION
from memfit.report._validation import DIFFERS

if TYPE_CHECKING:
    from memfit.estimator import Validation

__all__ = ["VALIDATION_CSS", "validation_sections"]

VALIDATION_CSS = (
    PAGE_CSS
    + """
h1 { font-size: 20px; margin: 0 0 8px; }
table { border-collapse: collapse; }
th, td { padding: 4px 12px; border-bottom: 1px solid #eee; text-align: left; }
th { color: #555; font-weight: 600; border-bottom: 2px solid #ddd; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.differs { color: #8a5a00; font-weight: 700; }
p.warn { color: #8a5a00; background: #fff8e1; padding: 6px 12px; border-radius: 4px; }
p.caption { color: #666; font-size: 12px; }
"""
)


def _e(text: str) -> str:
    return escape(text, quote=True)


def _figures(result: Validation) -> str:
    body = ""
    for label, estimated, measured in result.rows():
        if measured is None:
            continue  # NVML could not tell the process's memory
        error = result.error(estimated, measured)
        body += (
            f"<tr><th scope='row'>{_e(label)}</th>"
            f"<td class='num'>{_e(format_bytes(estimated))}</td>"
            f"<td class='num'>{_e(format_bytes(measured))}</td>"
            f"<td class='num'>{'n/a' if error is None else f'{error * 100:+.2f}%'}</td></tr>"
        )
    return (
        "<table><thead><tr><th></th><th class='num'>estimate</th><th class='num'>measured</th>"
        f"<th class='num'>error</th></tr></thead><tbody>{body}</tbody></table>"
    )


def _versions(result: Validation) -> str:
    assumed, host = result.estimate.versions, result.measured.versions
    differing = set(assumed.differing(host))
    body = "".join(
        f"<tr><td>{_e(name)}</td><td>{_e(mine or 'not installed')}</td>"
        f"<td>{_e(theirs or 'not installed')}</td>"
        + (f"<td class='differs'>{DIFFERS}</td>" if name in differing else "<td></td>")
        + "</tr>"
        for (name, mine), (_, theirs) in zip(assumed.items(), host.items(), strict=True)
    )
    return (
        "<h2>Library versions</h2><table><thead><tr><th>library</th><th>estimate assumed</th>"
        f"<th>GPU host</th><th></th></tr></thead><tbody>{body}</tbody></table>"
    )


def validation_sections(result: Validation) -> list[str]:
    """``result`` as HTML parts: a heading, the figures and their errors, the measurement's
    notes, the versions of both sides and a warning where they differ."""
    real = result.measured
    model = result.estimate.workload.model
    title = f"{model}: estimate vs {real.gpu_name}, torch {real.torch_version}"
    parts = [f"<h1>{_e(title)}</h1>", _figures(result)]
    parts += [f'<p class="warn">Measured: {_e(note)}.</p>' for note in real.notes]
    parts.append(_versions(result))
    if result.estimate.versions.differing(real.versions):
        parts.append(
            '<p class="warn">Memory depends on library versions: where they differ, the '
            "estimate is for the versions it assumed, not for this GPU host's.</p>"
        )
    parts.append(f'<p class="caption">{_e(UNITS_CAPTION)}</p>')
    return parts
