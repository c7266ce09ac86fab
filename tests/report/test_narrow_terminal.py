"""Every table fits the terminal: at 80 columns no line is longer and no row takes more than
two lines (a narrower layout drops or shortens columns and says so); wide terminals keep the
full tables."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from plan_data import fitting_plan, many_plan, nothing_fits_plan
from rich.console import Console
from snapshot_data import SOME_TRACES
from table_rows import Printed, printed

import memfit.snapshot as ms
from memfit._units import GiB, MiB
from memfit.estimator import Measurement, Validation, Versions
from memfit.monitor import Diagnosis, FrameworkInfo, GpuInfo, MemoryStats, ProcessSettings
from memfit.planner import Candidate, Evaluated, Plan
from memfit.report import (
    plan_renderable,
    render_batch_size,
    render_catalog,
    render_doctor,
    render_estimate,
    render_plan,
    render_saved_calibrations,
    render_snapshot,
    render_validation,
)
from memfit.workload import catalog_entries

NARROW, WIDE = 80, 160


def _fits(out: Printed) -> None:
    assert out.widest() <= out.width, "\n".join(out.lines)
    assert out.tables, "nothing was drawn as a table"
    if out.width == NARROW:
        assert out.tallest_row() <= 2, "\n".join(out.lines)


def _candidate(micro: int, precision: str, ckpt: bool | str | float, **kw: Any) -> Candidate:
    return Candidate(micro, 32 // micro, precision, ckpt, kw.pop("optimizer", "adamw-fused"), **kw)


def mixed_plan() -> Plan:
    """The settings a row can show at their longest: partial checkpointing with offload, a
    compiled model's budget, both offloads, the in-backward optimizer, an allocator setting."""
    plan = fitting_plan()
    candidates = [
        _candidate(8, "bf16-mixed", 0.5, offload=1.0, allocator_config="expandable_segments:True"),
        _candidate(4, "fp16-mixed", True, offload=0.5, offload_checkpoints=True),
        _candidate(16, "bf16-mixed", "selective", optimizer="adamw-in-backward"),
        _candidate(2, "fp32", False, memory_budget=0.25, optimizer="adamw-8bit"),
        _candidate(32, "fp32", False, optimizer="adamw"),
    ]
    rows = []
    for i, c in enumerate(candidates):
        fits = i < 3
        rows.append(
            Evaluated(
                candidate=c,
                peak_allocated=(10 + 4 * i) * GiB,
                peak_reserved=(11 + 4 * i) * GiB,
                needed=(12 + 4 * i) * GiB + 700 * MiB,
                step_seconds=0.3 + i / 10,
                samples_per_second=1000 / (3 + i),
                tokens_per_second=1_024_000 / (3 + i),
                bound="host" if i % 2 else "gpu",
                fits=fits,
                changes=("precision bf16-mixed (was fp32)",),
            )
        )
    return Plan(**{**vars_of(plan), "candidates": rows, "chosen": rows[0], "baseline": rows[-1]})


def vars_of(plan: Plan) -> dict[str, Any]:
    return {f: getattr(plan, f) for f in plan.__dataclass_fields__}


PLANS = {
    "fits": fitting_plan,
    "nothing fits": nothing_fits_plan,
    "many, no tokens": many_plan,
    "every setting": mixed_plan,
}


@pytest.mark.parametrize("width", [NARROW, 100, 120, WIDE])
@pytest.mark.parametrize("make", PLANS.values(), ids=PLANS.keys())
def test_every_plan_table_fits(make: Any, width: int) -> None:
    _fits(printed(lambda c: render_plan(make(), c, show_all=True), width))


def test_at_80_columns_the_plan_drops_tokens_and_bound_and_says_how_to_see_them() -> None:
    out = printed(lambda c: render_plan(mixed_plan(), c), NARROW)
    header = next(line for line in out.lines if "needs" in line and "fits" in line)
    assert "tokens/s" not in header and "bound" not in header and "settings" in header
    text = " ".join(out.text.split())
    assert "Left out at this width: tokens/s (samples/s x 1024 tokens) and bound" in text
    assert "or --json shows them" in text
    # the settings as tags, each said under the table
    row = " ".join(out.text.split("▶ 1")[1].split("\n")[0:2][0].split())
    assert row.startswith("8 x 4 bf16-mixed ckpt-50% offload")
    for tag in ("ckpt-N%", "sel-ckpt", "budget-B", "offload-N%", "offload-in", "expandable"):
        assert f"{tag}: " in text
    wider = int(text.split("a terminal of ")[1].split()[0])
    again = printed(lambda c: render_plan(mixed_plan(), c), wider)
    assert "tokens/s" in again.text and "Left out" not in again.text
    assert again.tallest_row() <= 2


def test_a_wide_terminal_keeps_a_column_for_each_setting() -> None:
    out = printed(lambda c: render_plan(mixed_plan(), c), 200)
    header = next(line for line in out.lines if "needs" in line and "fits" in line)
    for column in ("precision", "checkpointing", "optimizer", "allocator", "tokens/s", "bound"):
        assert column in header
    assert out.tallest_row() == 1 and "Settings:" not in out.text


def test_plan_renderable_lays_out_for_the_width_it_is_given() -> None:
    console = Console(width=NARROW, record=True, color_system=None)
    console.print(plan_renderable(fitting_plan(), width=NARROW))
    assert max(len(line) for line in console.export_text().splitlines()) <= NARROW


@pytest.mark.parametrize("width", [NARROW, WIDE])
def test_an_estimate_fits(width: int, estimate_factory: Any) -> None:
    long_name = "model.decoder.layers.23.encoder_attn.k_proj.lora_A.weight"
    estimate = estimate_factory(
        gpu="24GiB",
        modules=[(long_name, 900 * MiB), ("lm_head", 600 * MiB)],
        notes=["a note long enough to wrap " * 8],
    )
    out = printed(lambda c: render_estimate(estimate, c), width)
    _fits(out)
    assert (long_name in out.text) == (width == WIDE)  # cut in the middle only where needed
    assert "model.decoder.layers" in out.text and "lora_A.weight" in out.text  # both ends


def _batch_search(trials: int) -> SimpleNamespace:
    points = [
        SimpleNamespace(
            batch_size=b, peak_reserved=b * GiB, need=b * GiB - MiB, total=b * GiB + 700 * MiB
        )
        for b in (1, 2, 4, 8, 16, 4099, 8192)
    ]
    tried = [
        SimpleNamespace(
            batch_size=8,
            outcome="fits",
            peak_reserved=8 * GiB,
            predicted_reserved=8 * GiB,
            seconds=3.0,
        )
    ] * trials
    return SimpleNamespace(
        batch_size=8,
        confirmed=bool(trials),
        gpu="NVIDIA H100 80GB HBM3",
        gpu_total=80 * GiB,
        budget=78 * GiB,
        margin=2 * GiB,
        estimates=points,
        trials=tried,
        limited_by="memory",
        estimate_seconds=2.5,
        per_sample=GiB,
        pressure_note=lambda: "fits only because the allocator frees its cache " * 3,
        traced=[1, 6, 10, 8],
        replayed=[7, 8],
        batch_model="batch sizes 7, 8 replayed through the allocator from a batch model of the "
        "traces at 6, 10 (matched event by event); traced: 1, 6, 10; batch size 8 traced again "
        "to check the replay: the same",
    )


@pytest.mark.parametrize("width", [NARROW, WIDE])
def test_a_batch_size_search_fits(width: int) -> None:
    model = "/home/someone/projects/a-long-project-name/models/model.py:make_model"
    _fits(printed(lambda c: render_batch_size(_batch_search(2), model, c), width))  # type: ignore[arg-type]


# a small real snapshot recorded with Python stacks, and a large one without
SNAPSHOTS = [Path(__file__).parents[1] / "snapshot" / "data" / "python.pickle.gz", SOME_TRACES[0]]


@pytest.mark.parametrize("width", [NARROW, WIDE])
@pytest.mark.parametrize("path", SNAPSHOTS, ids=["python stacks", "no stacks"])
def test_a_snapshot_fits(path: Any, width: int) -> None:
    report = ms.report(path)
    out = printed(lambda c: render_snapshot(report, c), width)
    _fits(out)
    if report.top_blocks and any(b.site for b in report.top_blocks):
        said = "Addresses left out at this width" in out.text
        assert said == (width == NARROW)
        assert ("0x" in out.text) == (width == WIDE)


@pytest.mark.parametrize("width", [NARROW, WIDE])
def test_the_catalog_fits_and_never_cuts_a_name(width: int) -> None:
    entries = catalog_entries()
    out = printed(lambda c: render_catalog(entries, c), width)
    _fits(out)
    for entry in entries.values():
        assert entry["name"] in out.text
        for alias in entry.get("aliases", []):
            assert alias in out.text.replace("\n", " ")
    assert ("description" in out.lines[1]) == (width == WIDE)
    if width == NARROW:
        assert "Descriptions: in a terminal at least" in out.text


def _diagnosis() -> Diagnosis:
    env = {
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,max_split_size_mb:512",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.45",
    }
    stats = [
        MemoryStats("torch", f"gpu:{i}", "gpu", i, None, 20 * GiB, 30 * GiB, 40 * GiB, None)
        for i in range(2)
    ]
    processes = [
        ProcessSettings(4242, [0, 1], "published", env, ["torch"], stats),
        ProcessSettings(77, [], "environment", {}),
    ]
    return Diagnosis(
        python="3.11.7",
        driver="580.65.06",
        cuda_driver="13.0",
        nvml_error=None,
        gpus=[
            GpuInfo(i, "NVIDIA H100 80GB HBM3", 80 * GiB, 41 * GiB, False, [(4242, 40 * GiB)])
            for i in range(2)
        ],
        frameworks=[FrameworkInfo("torch", "2.14.1+cu130", "13.0")],
        settings={"PYTORCH_CUDA_ALLOC_CONF": None, "CUDA_VISIBLE_DEVICES": "0,1"},
        processes=processes,
    )


@pytest.mark.parametrize("width", [NARROW, WIDE])
def test_doctor_fits(width: int) -> None:
    out = printed(lambda c: render_doctor(_diagnosis(), c), width)
    _fits(out)
    text = out.text.replace("\n", " ")
    assert "4242" in text and "expandable_segments:True,max_split_size_mb:512" in text


@pytest.mark.parametrize("width", [NARROW, WIDE])
def test_saved_calibrations_fit(width: int) -> None:
    source = (
        "measured 2026-12-06 on this machine by memfit calibrate, torch 2.14.1+cu130, CUDA "
        "13.0; kept from memfit's (measured 2026-12-02, torch 2.11.0+cu130): conv, pinned"
    )
    rows = [
        {"key": "h100", "gpu": "NVIDIA H100 80GB HBM3", "source": source, "path": "/c/h100.json"},
        {"key": "h200", "gpu": "NVIDIA H200", "source": "measured on a test", "path": "/c/h200"},
    ]
    out = printed(lambda c: render_saved_calibrations(rows, "/c", c), width)
    _fits(out)
    assert "measured 2026-12-06" in out.text and "/c/h200" in out.text


@pytest.mark.parametrize("width", [NARROW, WIDE])
def test_a_validation_fits(width: int, estimate_factory: Any) -> None:
    estimate = estimate_factory(gpu="h100", model="/home/someone/models/my_model.py:build")
    measured = Measurement(
        peak_allocated=estimate.peak_allocated // 2,
        peak_reserved=estimate.peak_reserved,
        setup_allocated=0,
        nvml_process=estimate.peak_reserved + 700 * MiB,
        context=700 * MiB,
        step_seconds=0.25,
        gpu_name="NVIDIA H100 80GB HBM3",
        torch_version="2.11.0+cu130",
        allocator_config="",
        versions=Versions(torch="2.11.0+cu130", transformers="5.17.0", timm="1.0.20"),
    )
    out = printed(lambda c: render_validation(Validation(estimate, measured), c), width)
    _fits(out)
    assert "+100.00%" in out.text  # the allocated peak: twice what was measured
