"""``memfit watch`` frames and logs, rendered from samples a real H200 driver gave (replayed)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from rich.console import Console

from memfit import InvalidInputError, format_bytes
from memfit.monitor import Monitor, Replay, Sample, load_recording
from memfit.report import LOG_COLUMNS, SampleLog, WatchHistory, log_rows, render_sample, watch_frame

H200 = Path(__file__).parents[1] / "monitor" / "fixtures" / "nvml-h200.json.gz"
pytestmark = pytest.mark.skipif(
    not Path(H200).exists(), reason="the recorded H200 fixture is not there yet (nvml_record.py)"
)


@pytest.fixture(scope="module")
def recording():
    return load_recording(H200)


def _samples(doc, scenario: str, n: int = 1) -> list[Sample]:
    replay = Replay(doc, scenario, loop=False)
    with Monitor(replay, procs=replay.procs, published=replay.published) as monitor:
        return [monitor.sample() for _ in range(n)]


def _text(sample: Sample, history: WatchHistory | None = None) -> str:
    console = Console(record=True, width=220, color_system=None)
    render_sample(sample, console, history)
    return console.export_text()


def test_a_training_frame_puts_torch_beside_nvml(recording):
    (sample,) = _samples(recording, "train")
    dev = sample.devices[0]
    proc = dev.processes[0]
    text = _text(sample)
    assert dev.name in text
    assert f"{format_bytes(dev.memory_used)} / {format_bytes(dev.memory_total)}" in text
    assert f"{dev.utilization_gpu}%" in text
    row = next(line for line in text.splitlines() if f" {proc.pid} " in line)
    for value in (
        proc.used_memory,
        proc.torch.allocated,
        proc.torch.reserved,
        proc.torch.max_allocated,
        proc.non_torch,
    ):
        assert format_bytes(value) in row
    assert proc.user in row
    assert "outside = GPU mem - pool (CUDA context" in " ".join(text.split())
    assert " torch " in row


def test_an_idle_frame_says_there_is_nothing(recording):
    (sample,) = _samples(recording, "idle")
    assert "no processes on the selected GPUs" in _text(sample)


def test_a_lost_gpu_and_missing_fields_render_as_words(recording):
    import dataclasses

    (sample,) = _samples(recording, "train")
    dev = sample.devices[0]
    lost = dataclasses.replace(
        dev,
        status="lost",
        error="GpuIsLost",
        memory_used=None,
        memory_total=None,
        utilization_gpu=None,
        temperature_c=None,
        power_w=None,
        processes=(),
    )
    text = _text(dataclasses.replace(sample, devices=(lost,)))
    assert "lost (GpuIsLost)" in text and "N/A" in text


def test_the_history_is_one_character_per_sample(recording):
    samples = _samples(recording, "train+infer", n=3)
    history = WatchHistory(length=2)
    for s in samples:
        history.add(s)
    spark = history.sparkline(samples[-1].devices[0])
    assert len(spark) == 2 and set(spark) <= set("▁▂▃▄▅▆▇█")
    assert spark in _text(samples[-1], history)


def test_a_command_cannot_inject_markup(recording):
    import dataclasses

    (sample,) = _samples(recording, "train")
    dev = sample.devices[0]
    proc = dataclasses.replace(dev.processes[0], command="python [bold red]evil[/]")
    frame = watch_frame(
        dataclasses.replace(sample, devices=(dataclasses.replace(dev, processes=(proc,)),))
    )
    console = Console(record=True, width=220, color_system=None)
    console.print(frame)
    assert "[bold red]evil[/]" in console.export_text()


def test_csv_log_appends_rows_with_one_header(recording, tmp_path):
    samples = _samples(recording, "train+infer", n=2)
    path = tmp_path / "gpu.csv"
    for s in samples:
        with SampleLog(path) as log:
            log.write(s)
    rows = list(csv.DictReader(path.open()))
    assert list(rows[0]) == list(LOG_COLUMNS)
    assert len(rows) == sum(len(log_rows(s)) for s in samples)
    procs = [r for r in rows if r["kind"] == "process"]
    first = samples[0].devices[0].processes[0]
    assert int(procs[0]["used_memory"]) == first.used_memory
    assert int(procs[0]["non_torch"]) == first.non_torch
    gpu = next(r for r in rows if r["kind"] == "gpu")
    assert gpu["pid"] == ""  # not applicable: empty, not a made-up number


def test_jsonl_log_is_a_sample_a_line(recording, tmp_path):
    samples = _samples(recording, "train", n=2)
    path = tmp_path / "gpu.jsonl"
    with SampleLog(path) as log:
        for s in samples:
            log.write(s)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [json.loads(json.dumps(s.to_dict())) for s in samples]


def test_a_log_with_another_suffix_is_refused(tmp_path):
    with pytest.raises(InvalidInputError, match=r"gpu\.txt: the suffix picks the format"):
        SampleLog(tmp_path / "gpu.txt")


@pytest.mark.parametrize("width", [80, 100, 220])
def test_no_number_wraps_at_any_width(recording, width):
    # on a narrow terminal the memory bar goes (the numbers say it), never "used / total"
    sample = _samples(recording, "train+infer")[0]
    console = Console(record=True, width=width, color_system=None)
    render_sample(sample, console, WatchHistory())
    text = console.export_text()
    gpu_rows = [line for line in text.splitlines() if "NVIDIA H200" in line]
    assert gpu_rows and all("/ 140.40 GiB" in line for line in gpu_rows)
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width
    if width in (80, 220):
        assert ("▕" in text) == (width == 220)  # the bar, where it fits


def test_a_jax_process_shows_its_own_numbers_in_the_framework_columns(recording, tmp_path):
    import dataclasses

    from memfit.monitor import MemoryStats

    (sample,) = _samples(recording, "train")
    dev = sample.devices[0]
    proc = dev.processes[0]
    row = MemoryStats("jax", "gpu:0", "gpu", 0, None, 3 * 2**30, 4 * 2**30, 5 * 2**30, None)
    jax_proc = dataclasses.replace(proc, torch=None, frameworks=(row,))
    sample = dataclasses.replace(sample, devices=(dataclasses.replace(dev, processes=(jax_proc,)),))
    line = next(x for x in _text(sample).splitlines() if f" {proc.pid} " in x)
    for cell in (
        " jax ",
        "3.00 GiB",
        "5.00 GiB",
        "4.00 GiB",
        format_bytes(proc.used_memory - 5 * 2**30),
    ):
        assert cell in line
    (_, logged) = log_rows(sample)
    assert (logged["framework"], logged["in_use"], logged["pool"], logged["torch_allocated"]) == (
        "jax",
        3 * 2**30,
        5 * 2**30,
        None,
    )
    assert logged["outside_pool"] == proc.used_memory - 5 * 2**30


@pytest.mark.parametrize("width", [80, 100, 160])
def test_a_frame_fits_the_terminal_with_each_process_on_one_line(recording, width):
    (sample,) = _samples(recording, "train+infer")
    console = Console(record=True, width=width, color_system=None)
    render_sample(sample, console)
    lines = console.export_text().splitlines()
    assert max(len(line.rstrip()) for line in lines) <= width
    for proc in sample.devices[0].processes:
        row = next(line for line in lines if f" {proc.pid} " in f" {line} " and "GiB" in line)
        # every number of the process on its one line, none cut short
        for value in (proc.used_memory, proc.torch.allocated, proc.torch.reserved):
            assert format_bytes(value) in row
