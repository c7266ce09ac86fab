"""The batch-size search drawn as SVG and HTML (no matplotlib), and the one path check."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from memfit import InvalidInputError, MissingExtraError
from memfit._units import GiB, MiB
from memfit.report import (
    BATCH_PLOT_SUFFIXES,
    PLOT_SUFFIXES,
    batch_size_html,
    batch_size_svg,
    check_plot_path,
    write_batch_size_plot,
)


def _search(trials: int = 0) -> SimpleNamespace:
    point = SimpleNamespace
    estimates = [
        point(batch_size=b, peak_reserved=b * GiB, context=700 * MiB, total=b * GiB + 700 * MiB)
        for b in (1, 2, 4, 8, 16)
    ]
    tried = [point(batch_size=8, outcome="fits", peak_reserved=8 * GiB)] * trials
    return SimpleNamespace(
        batch_size=8,
        confirmed=bool(trials),
        gpu="24GiB GPU <test>",
        gpu_total=24 * GiB,
        budget=23 * GiB,
        margin=GiB,
        estimates=estimates,
        trials=tried,
    )


def test_the_batch_search_takes_the_estimate_plot_formats():
    assert set(PLOT_SUFFIXES) <= set(BATCH_PLOT_SUFFIXES)


def test_svg_is_standalone_and_escaped():
    svg = batch_size_svg(_search(trials=1), standalone=True)
    assert svg.startswith("<svg xmlns=") and svg.endswith("</svg>")
    assert "Largest batch: 8 (confirmed on the GPU)" in svg and "&lt;test&gt;" in svg
    assert "<circle" in svg  # the GPU trial


def test_html_page_has_the_chart_and_every_estimate():
    page = batch_size_html(_search(), "bert")
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page
    assert page.count("<tr><td>") == 5 and "largest batch of bert" in page


@pytest.mark.parametrize("suffix", [".svg", ".html", ".htm"])
def test_write_picks_the_format_from_the_suffix(tmp_path, suffix):
    path = tmp_path / f"search{suffix}"
    write_batch_size_plot(_search(), path)
    assert "<svg" in path.read_text()


def test_write_refuses_an_unknown_suffix(tmp_path):
    with pytest.raises(InvalidInputError, match=r"'\.pdf'.*\.png, \.svg, \.html or \.htm"):
        write_batch_size_plot(_search(), tmp_path / "search.pdf")


def test_check_refuses_a_png_without_matplotlib(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MissingExtraError, match=r"memfit\[plot\]"):
        check_plot_path(tmp_path / "m.png", PLOT_SUFFIXES)
    assert check_plot_path(tmp_path / "m.svg", PLOT_SUFFIXES) == tmp_path / "m.svg"
