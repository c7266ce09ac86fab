"""How a result shows itself in a notebook (``_repr_html_``) while only ``memfit.report``
renders.

The data objects (:class:`memfit.Estimate`, :class:`memfit.Plan`, ...) live in layers below
``report`` and may not import it, not even inside a method. So each asks this registry for the
HTML of its kind (:func:`html_repr`), and the registry asks a source that the top-level
``memfit`` package installs (:func:`set_html_source`): a function that imports
``memfit.report`` on the first display and returns its renderers. Nothing below ``report``
names it, ``import memfit`` imports neither ``report`` nor torch, and an object displayed
without a source (none installed) falls back to its plain ``repr``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

__all__ = ["HTML_KINDS", "HtmlKind", "HtmlRenderer", "html_repr", "set_html_source"]

# what can be displayed as HTML: one name per data object
HtmlKind = Literal["estimate", "validation", "plan", "batch_size", "snapshot"]
HTML_KINDS: tuple[HtmlKind, ...] = ("estimate", "validation", "plan", "batch_size", "snapshot")
HtmlRenderer = Callable[[Any], str]
HtmlSource = Callable[[], Mapping[HtmlKind, HtmlRenderer]]

_source: HtmlSource | None = None
_renderers: dict[HtmlKind, HtmlRenderer] | None = None


def set_html_source(source: HtmlSource | None) -> None:
    """Install where the renderers come from: ``source()`` is called once, on the first
    display, and returns a renderer for each kind it knows. ``None`` removes it."""
    global _source, _renderers
    _source, _renderers = source, None


def html_repr(kind: HtmlKind, obj: object) -> str | None:
    """``obj`` (a result of ``kind``) as an HTML fragment for a notebook; ``None`` (the
    notebook shows the plain ``repr``) when no renderer is installed for ``kind``."""
    global _renderers
    if _renderers is None:
        if _source is None:
            return None
        _renderers = dict(_source())
    render = _renderers.get(kind)
    return None if render is None else render(obj)
