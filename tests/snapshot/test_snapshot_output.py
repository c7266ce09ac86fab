"""What ``memfit snapshot`` prints and writes: the table, JSON, HTML, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from snapshot_data import SOME_TRACES, check_html

import memfit.snapshot as ms
from memfit.cli import main


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
