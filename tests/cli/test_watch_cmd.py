"""``memfit watch`` and ``memfit export`` from the command line, on a replayed H200 recording."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from memfit.cli import main

H200 = str(Path(__file__).parents[1] / "monitor" / "fixtures" / "nvml-h200.json.gz")
pytestmark = pytest.mark.skipif(
    not Path(H200).exists(), reason="the recorded H200 fixture is not there yet (nvml_record.py)"
)
REPLAY = ["--replay", H200]


def test_watch_once_json_is_one_sample(capsys):
    assert main(["watch", "--once", "--json", *REPLAY, "--scenario", "train"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "memfit.sample/1"
    proc = doc["devices"][0]["processes"][0]
    assert proc["torch"]["reserved"] <= proc["used_memory"]


def test_watch_once_prints_the_tables(capsys):
    assert main(["watch", "--once", *REPLAY, "--scenario", "train+infer"]) == 0
    out = capsys.readouterr().out
    assert "GPUs" in out and "Processes" in out and "outside" in out


def test_watch_json_lines_and_count(capsys):
    assert main(["watch", "--json", "--count", "3", "--interval", "0.01", *REPLAY]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and all(json.loads(line)["schema"] for line in lines)


def test_without_a_terminal_log_only(capsys, tmp_path):
    log = tmp_path / "gpu.csv"
    args = ["watch", "--count", "2", "--interval", "0.01", "--log", str(log), *REPLAY]
    assert main([*args, "--scenario", "train"]) == 0
    assert capsys.readouterr().out == ""
    rows = list(csv.reader(log.open(newline="")))
    assert len(rows) == 1 + 2 * 2  # header, then a GPU and a process each
    assert log.read_text().count("\n") == len(rows)  # one line a row: commands are one line


def test_export_prints_where_it_serves(capsys):
    args = ["export", "--port", "0", "--duration", "0.2", "--json", *REPLAY]
    assert main(args) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["url"].startswith("http://127.0.0.1:") and info["devices"] == [0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--devices", "0,x"], "--devices '0,x' is not understood"),
        (["--devices", "3"], "GPU 3 does not exist"),
        (["--interval", "0"], "--interval 0 is not accepted"),
        (["--scenario", "nope"], "no scenario 'nope'"),
        (["--log", "gpu.txt", "--count", "1"], "the suffix picks the format"),
    ],
)
def test_bad_options_are_one_paragraph(capsys, args, message):
    assert main(["watch", *REPLAY, *args]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


H200X2 = str(Path(__file__).parents[1] / "monitor" / "fixtures" / "nvml-h200x2.json.gz")


def _x2(capsys, *args):
    assert main(["watch", "--once", "--json", "--replay", H200X2, *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_two_gpus_each_with_its_own_processes(capsys):
    # recorded on the 2-GPU machine: the training and inference processes ran on GPU 0
    doc = _x2(capsys, "--scenario", "train+infer")
    assert [d["index"] for d in doc["devices"]] == [0, 1]
    busy, idle = doc["devices"]
    assert len(busy["processes"]) == 2 and all(p["torch"] for p in busy["processes"])
    assert idle["processes"] == [] and busy["uuid"] != idle["uuid"]
    assert busy["memory_used"] >= sum(p["used_memory"] for p in busy["processes"])


def test_two_gpus_one_selected(capsys):
    doc = _x2(capsys, "--scenario", "train", "--devices", "1")
    assert [d["index"] for d in doc["devices"]] == [1]
    assert doc["devices"][0]["processes"] == []


def test_two_gpus_a_third_does_not_exist(capsys):
    assert main(["watch", "--once", "--replay", H200X2, "--devices", "2"]) == 1
    err = capsys.readouterr().err
    assert "GPU 2 does not exist: this machine has 2" in err and "Traceback" not in err


def test_two_gpus_exported(capsys):
    args = ["export", "--port", "0", "--duration", "0.2", "--json", "--replay", H200X2]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["devices"] == [0, 1]
