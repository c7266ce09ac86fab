"""The watch views where NVML could answer nothing: every figure is N/A, nothing crashes. No
numbers are made up here (the views' numbers are tested on the recorded H200 fixture); the one
process is this test process, read from /proc as the sampler would."""

from __future__ import annotations

import csv
import json
import os
import time
from pathlib import Path

import pytest
from rich.console import Console

from memfit.monitor import LinuxProcs, Sample
from memfit.monitor._samples import DeviceSample, ProcessSample
from memfit.report import SampleLog, WatchHistory, log_rows, render_sample


def _sample() -> Sample:
    me = LinuxProcs().read(os.getpid())
    assert me is not None
    process = ProcessSample(
        pid=os.getpid(),
        gpu=0,
        kind="compute",
        used_memory=None,
        user=me.user,
        command=me.command,
        container=me.container,
        pod=me.pod,
        torch=None,
        cuda_initialised=None,
    )
    fields = dict.fromkeys(
        (
            "uuid",
            "name",
            "memory_total",
            "memory_used",
            "memory_reserved",
            "utilization_gpu",
            "utilization_memory",
            "temperature_c",
            "power_w",
            "power_limit_w",
            "processes_error",
        )
    )
    lost = DeviceSample(
        index=0, status="lost", error="NVMLError_GpuIsLost", processes=(process,), **fields
    )
    return Sample(time=time.time(), driver_version=None, devices=(lost,))


@pytest.mark.parametrize("width", [80, 200])
def test_a_lost_gpu_renders_as_not_available(width: int) -> None:
    console = Console(record=True, width=width, color_system=None)
    history = WatchHistory()
    render_sample(_sample(), console, history)
    text = console.export_text()
    assert "lost" in text.lower()
    assert "N/A" in text
    assert str(os.getpid()) in text


def test_json_and_logs_keep_not_available_as_null(tmp_path: Path) -> None:
    sample = _sample()
    doc = json.loads(json.dumps(sample.to_dict()))
    assert doc["devices"][0]["memory_used"] is None
    assert log_rows(sample)
    for suffix in (".csv", ".jsonl"):
        path = tmp_path / f"log{suffix}"
        with SampleLog(path) as log:
            log.write(sample)
        text = path.read_text()
        assert text
        if suffix == ".csv":
            rows = list(csv.DictReader(text.splitlines()))
            assert rows and all(r.get("memory_used", "") in ("", None) for r in rows)


def test_on_a_narrow_terminal_commands_get_their_own_lines() -> None:
    console = Console(record=True, width=80, color_system=None)
    render_sample(_sample(), console, WatchHistory())
    lines = console.export_text().splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    # the command is not squeezed into a column a few characters wide
    assert any(line.strip().startswith(str(os.getpid())) for line in lines)
