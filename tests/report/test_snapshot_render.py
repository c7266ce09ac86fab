"""The snapshot report rendered: the terminal summary and the self-contained HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from snapshot_data import SOME_TRACES, STACKS, check_html

import memfit.snapshot as ms
from memfit.report import render_snapshot, snapshot_html, write_snapshot_html


def test_html_is_well_formed_offline_and_has_the_views(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    rep = ms.report(SOME_TRACES[1])
    write_snapshot_html(rep, out)
    text = out.read_text()
    parser = check_html(text)
    assert text.startswith("<!DOCTYPE html>")
    assert {"svg", "table", "polyline", "rect"} <= parser.tags
    assert "peak allocated" in text and "Segments at the peak reserved" in text
    assert "What if" in text and "expandable_segments" in text
    assert rep.recommendation.split(":")[0] in text


def test_html_escapes_what_the_file_says(write_snapshot: Any, tmp_path: Path) -> None:
    evil = {
        "filename": "/x/<script>alert(1)</script>.py",
        "line": 1,
        "name": "<img src=x onerror=alert(1)>",
    }
    path = write_snapshot(stacks=[[evil], *STACKS])
    text = snapshot_html(ms.report(path))
    check_html(text)
    assert "<script>" not in text and "<img" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text


def test_console_summary() -> None:
    console = Console(record=True, width=120)
    render_snapshot(ms.report(SOME_TRACES[0]), console)
    text = console.export_text()
    for words in (
        "Largest live blocks at the peak allocated",
        "no stack frames recorded",
        "What if",
        "expandable_segments:True",
        "peak reserved",
        "17.48 GiB",
        "emulator reproduces the recorded peak reserved exactly",
        "Recommendation:",
    ):
        assert words in text


def test_html_of_a_real_snapshot_with_cpp_frames() -> None:
    """C++ frame names are full of ``<`` and ``>`` (templates): the page must stay well formed."""
    data = Path(__file__).parents[1] / "snapshot" / "data" / "all.pickle.gz"
    text = snapshot_html(ms.report(data))
    check_html(text)
    assert "(backward) AddmmBackward0" in text
