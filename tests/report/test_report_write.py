"""write_estimate_plot: the suffix picks the writer; anything else is refused clearly."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from memfit._errors import InvalidInputError
from memfit.estimator._result import Estimate
from memfit.report import PLOT_SUFFIXES, write_estimate_plot

Factory = Callable[..., Estimate]


@pytest.mark.parametrize(
    ("name", "start"),
    [
        ("memory.html", b"<!DOCTYPE html>"),
        ("memory.HTM", b"<!DOCTYPE html>"),
        ("memory.svg", b"<?xml"),
        ("memory.png", b"\x89PNG"),
    ],
)
def test_dispatch_on_suffix(
    estimate_factory: Factory, tmp_path: Path, name: str, start: bytes
) -> None:
    if name.endswith(".png"):
        pytest.importorskip("matplotlib")
    path = tmp_path / name
    write_estimate_plot(estimate_factory(gpu="h100"), path)
    assert path.read_bytes().startswith(start)
    assert [p.name for p in tmp_path.iterdir()] == [name]


@pytest.mark.parametrize("name", ["memory.pdf", "memory", "memory.html.gz"])
def test_unknown_suffix(estimate_factory: Factory, tmp_path: Path, name: str) -> None:
    with pytest.raises(InvalidInputError, match=r"ending in \.png, \.html, \.htm or \.svg"):
        write_estimate_plot(estimate_factory(), tmp_path / name)
    assert list(tmp_path.iterdir()) == []


def test_unknown_suffix_is_named(estimate_factory: Factory, tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match=r"the suffix '\.pdf'"):
        write_estimate_plot(estimate_factory(), tmp_path / "memory.pdf")


@pytest.mark.parametrize("name", ["out.html", "out.svg", "out.png"])
def test_never_overwrites_a_folder(estimate_factory: Factory, tmp_path: Path, name: str) -> None:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "keep.txt").write_text("keep")
    with pytest.raises(InvalidInputError, match="is a folder"):
        write_estimate_plot(estimate_factory(), folder)
    assert (folder / "keep.txt").read_text() == "keep"
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_overwrites_an_existing_file(estimate_factory: Factory, tmp_path: Path) -> None:
    path = tmp_path / "memory.html"
    path.write_text("old")
    write_estimate_plot(estimate_factory(), path)
    assert path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_suffixes_are_public() -> None:
    assert PLOT_SUFFIXES == (".png", ".html", ".htm", ".svg")
