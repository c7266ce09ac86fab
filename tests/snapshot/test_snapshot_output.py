"""What ``memfit snapshot`` prints and writes: the table, JSON, HTML, exit codes."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from snapshot_data import SOME_TRACES, STACKS

import memfit.snapshot as ms
from memfit.cli import main

VOID = {"meta", "br", "img", "input", "link", "hr", "circle", "line", "polyline", "rect"}


class _Balance(HTMLParser):
    """Checks that every element is closed in order; collects src/href and tag names."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.tags: set[str] = set()
        self.links: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.links += [v or "" for k, v in attrs if k in ("src", "href", "xlink:href")]
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.links += [v or "" for k, v in attrs if k in ("src", "href", "xlink:href")]

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
            return
        self.stack.pop()


def check_html(text: str) -> _Balance:
    parser = _Balance()
    parser.feed(text)
    parser.close()
    assert parser.errors == [] and parser.stack == []
    assert "script" not in parser.tags and "iframe" not in parser.tags
    assert not [link for link in parser.links if re.match(r"(https?:)?//", link)]
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", text)
    assert "@import" not in text and "url(" not in text
    return parser


def test_json_schema() -> None:
    data = json.loads(ms.report(SOME_TRACES[0], top=3).to_json())
    assert data["schema"] == "memfit.snapshot/1" and data["units"] == "bytes"
    assert set(data) >= {
        "source",
        "device",
        "allocator_settings",
        "trace",
        "peaks",
        "fragmentation",
        "top_blocks",
        "top_sites",
        "frames_note",
        "segments_at_peak_reserved",
        "replay_check",
        "what_if",
        "recommendation",
        "ooms",
        "phases",
        "notes",
        "timeline",
    }
    for key in ("allocated", "requested", "reserved"):
        assert isinstance(data["peaks"][key]["bytes"], int)
        assert isinstance(data["peaks"][key]["event"], int)
    assert data["replay_check"]["exact"] is True
    assert len(data["top_blocks"]) == 3
    assert set(data["top_blocks"][0]) == {"address", "size", "stream", "event", "site"}
    row = data["what_if"][1]
    assert set(row) == {
        "label",
        "recorded",
        "peak_reserved",
        "peak_allocated",
        "saved",
        "outcome",
        "note",
    }
    timeline = data["timeline"]
    assert len(timeline["event"]) == len(timeline["allocated"]) == len(timeline["reserved"]) <= 500
    assert max(timeline["reserved"]) == data["peaks"]["reserved"]["bytes"]
    assert max(timeline["allocated"]) == data["peaks"]["allocated"]["bytes"]
    assert data["trace"]["starts_empty"] is True


def test_html_is_well_formed_offline_and_has_the_views(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    rep = ms.report(SOME_TRACES[1])
    ms.write_html(rep, out)
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
    text = ms.html_report(ms.report(path))
    check_html(text)
    assert "<script>" not in text and "<img" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text


def test_console_summary() -> None:
    console = Console(record=True, width=120)
    ms.render_snapshot(ms.report(SOME_TRACES[0]), console)
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


def test_cli_table_json_and_html(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    before = set(SOME_TRACES[4].parent.iterdir())
    assert main(["snapshot", str(SOME_TRACES[4]), "--html", str(out), "--top", "3"]) == 0
    text = capsys.readouterr().out
    assert "Replay check" in text and "HTML report written to" in text
    check_html(out.read_text())
    assert set(SOME_TRACES[4].parent.iterdir()) == before  # nothing written beside the input
    assert main(["snapshot", str(SOME_TRACES[4]), "--json", "--no-what-if"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["what_if"] == [] and data["peaks"]["reserved"]["bytes"] > 0


def test_cli_capacity_takes_gpu_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["snapshot", str(SOME_TRACES[4]), "--json", "--capacity", "4090"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "given capacity" in data["what_if"][-1]["note"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["snapshot", "/no/such/file.pickle"], "no such file"),
        (["snapshot", __file__], "not a valid pickle"),
        (["snapshot", str(SOME_TRACES[4]), "--top", "0"], "--top 0"),
        (["snapshot", str(SOME_TRACES[4]), "--capacity", "h10"], "Did you mean"),
        (["snapshot", str(SOME_TRACES[4]), "--html", "/no/such/dir/r.html"], "does not exist"),
    ],
)
def test_cli_errors_exit_1_without_traceback(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(args) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_cli_debug_shows_the_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--debug", "snapshot", "/no/such/file.pickle"]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_the_public_names() -> None:
    assert set(ms.__all__) == {n for n in dir(ms) if not n.startswith("_")} - {
        "annotations",
    }


def test_html_of_a_real_snapshot_with_cpp_frames() -> None:
    """C++ frame names are full of ``<`` and ``>`` (templates): the page must stay well formed."""
    data = Path(__file__).parent / "data" / "all.pickle.gz"
    text = ms.html_report(ms.report(data))
    check_html(text)
    assert "(backward) AddmmBackward0" in text
