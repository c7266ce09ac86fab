"""Choose a plot writer from the suffix of the path the user gave.

The CLI's ``--plot PATH`` and library users both go through :func:`write_estimate_plot`, so the list
of accepted formats and the error for any other lives in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from memfit._errors import InvalidInputError
from memfit.estimator import Estimate
from memfit.report._html import write_estimate_html
from memfit.report._paths import PathLike
from memfit.report._png import write_estimate_png
from memfit.report._svg import write_estimate_svg

__all__ = ["PLOT_SUFFIXES", "write_estimate_plot"]

_WRITERS: dict[str, Callable[[Estimate, PathLike], None]] = {
    ".png": write_estimate_png,
    ".html": write_estimate_html,
    ".htm": write_estimate_html,
    ".svg": write_estimate_svg,
}
PLOT_SUFFIXES: tuple[str, ...] = tuple(_WRITERS)


def write_estimate_plot(estimate: Estimate, path: PathLike) -> None:
    """Write ``estimate`` to ``path`` in the format its suffix names.

    ``.png`` (matplotlib, ``memfit[plot]``), ``.svg`` (the chart alone, no dependency) or
    ``.html``/``.htm`` (the full report with the chart inline, no dependency). Raises
    :class:`~memfit._errors.InvalidInputError` for any other suffix, for a folder, or for a
    path in a folder that does not exist.
    """
    suffix = Path(path).suffix.lower()
    writer = _WRITERS.get(suffix)
    if writer is None:
        given = f"the suffix '{suffix}'" if suffix else "no suffix"
        raise InvalidInputError(
            f"Cannot tell which format to write '{path}' in: it has {given}. "
            f"Give a path ending in {', '.join(PLOT_SUFFIXES[:-1])} or {PLOT_SUFFIXES[-1]}, "
            "e.g. 'memory.html'."
        )
    writer(estimate, path)
