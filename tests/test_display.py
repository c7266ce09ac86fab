"""memfit._display: the registry through which results below ``report`` show as HTML in a
notebook, and the wiring the top-level package installs."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping

import pytest

from memfit import _display
from memfit._display import HtmlKind, HtmlRenderer, html_repr, set_html_source


@pytest.fixture
def no_source(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry as a process has it before ``memfit`` installs its source; restored."""
    monkeypatch.setattr(_display, "_source", None)
    monkeypatch.setattr(_display, "_renderers", None)


@pytest.mark.usefixtures("no_source")
def test_without_a_source_nothing_is_rendered() -> None:
    assert html_repr("estimate", object()) is None


@pytest.mark.usefixtures("no_source")
def test_the_source_is_asked_once_and_its_renderer_gets_the_object() -> None:
    calls: list[str] = []

    def source() -> Mapping[HtmlKind, HtmlRenderer]:
        calls.append("asked")
        return {"plan": lambda obj: f"<p>{obj}</p>"}

    set_html_source(source)
    assert html_repr("plan", 7) == "<p>7</p>"
    assert html_repr("plan", 8) == "<p>8</p>"
    assert html_repr("snapshot", 8) is None  # a kind the source has no renderer for
    assert calls == ["asked"]


def test_memfit_installs_the_reports_renderers() -> None:
    from memfit.report import NOTEBOOK_RENDERERS

    assert _display._source is not None
    assert _display._source() is NOTEBOOK_RENDERERS


def test_import_memfit_loads_neither_torch_nor_the_report() -> None:
    code = (
        "import sys, memfit\n"
        "print('torch' in sys.modules, 'memfit.report' in sys.modules, 'rich' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "False"]
