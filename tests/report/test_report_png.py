"""write_estimate_png: a real PNG from matplotlib, and a clear error without it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from memfit._errors import InvalidInputError, MissingExtraError
from memfit._units import GiB
from memfit.estimator._result import Estimate, Timeline
from memfit.report import write_estimate_png

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_writes_a_png(estimate_factory: Callable[..., Estimate], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "memory.png"
    write_estimate_png(estimate_factory(gpu="h100"), path)
    assert path.read_bytes().startswith(PNG_MAGIC)
    assert [p.name for p in tmp_path.iterdir()] == ["memory.png"]


def test_large_timeline_with_capacity_line(
    estimate_factory: Callable[..., Estimate],
    timeline_factory: Callable[..., Timeline],
    tmp_path: Path,
) -> None:
    pytest.importorskip("matplotlib")
    timeline = timeline_factory(n=100_000, steps=2, scale=2 * GiB)
    path = tmp_path / "big.png"
    write_estimate_png(estimate_factory(gpu="4090", timeline=timeline), str(path))
    assert path.read_bytes().startswith(PNG_MAGIC)


def test_empty_timeline(estimate_factory: Callable[..., Estimate], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "empty.png"
    write_estimate_png(estimate_factory(timeline=Timeline([], [], [])), path)
    assert path.read_bytes().startswith(PNG_MAGIC)


def test_missing_matplotlib(
    estimate_factory: Callable[..., Estimate], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A None entry in sys.modules makes any import of that name raise ImportError.
    for name in list(sys.modules):
        if name == "matplotlib" or name.startswith("matplotlib."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    path = tmp_path / "memory.png"
    with pytest.raises(MissingExtraError, match=r"pip install 'memfit\[plot\]'") as info:
        write_estimate_png(estimate_factory(), path)
    assert info.value.package == "matplotlib"
    assert "PNG plots" in str(info.value)
    assert not path.exists()


def test_refuses_a_folder(estimate_factory: Callable[..., Estimate], tmp_path: Path) -> None:
    folder = tmp_path / "plots.png"
    folder.mkdir()
    with pytest.raises(InvalidInputError, match="is a folder"):
        write_estimate_png(estimate_factory(), folder)
    assert folder.is_dir() and not any(folder.iterdir())


def test_refuses_a_missing_folder(
    estimate_factory: Callable[..., Estimate], tmp_path: Path
) -> None:
    with pytest.raises(InvalidInputError, match="does not exist"):
        write_estimate_png(estimate_factory(), tmp_path / "nope" / "memory.png")
    assert not (tmp_path / "nope").exists()
