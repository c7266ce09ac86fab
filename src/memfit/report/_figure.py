"""The one way memfit's PNG plots make a figure: matplotlib, imported here when a plot is asked
for (``memfit[plot]``, an optional extra), on a figure with its own Agg canvas, never pyplot, so
that writing a plot neither changes the backend of the user's process (a notebook, say) nor
leaves figures open in pyplot's state."""

from __future__ import annotations

from typing import Any

from memfit._errors import MissingExtraError

__all__ = ["new_axes"]


def new_axes(width_in: float, height_in: float, dpi: int) -> tuple[Any, Any]:
    """A figure of ``width_in`` x ``height_in`` inches (constrained layout) and its one axes.
    Raises :class:`MissingExtraError` with the install hint where matplotlib is missing."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as err:
        raise MissingExtraError("matplotlib", "PNG plots", "plot") from err
    fig = Figure(figsize=(width_in, height_in), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()
