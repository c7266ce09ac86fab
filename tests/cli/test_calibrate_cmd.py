"""``memfit calibrate`` on a machine without a GPU (its errors), its rendering of a
calibration, and ``memfit plan --calibration`` / ``memfit.plan(calibration=)``."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch
from rich.console import Console
from torch import nn

import memfit
from memfit.cli import main
from memfit.planner.calibration import save_calibration, shipped
from memfit.report import render_calibration


@pytest.mark.skipif(torch.cuda.is_available(), reason="the error of a machine without a GPU")
def test_without_a_gpu_it_says_so_and_exits_2(capsys) -> None:
    assert main(["calibrate"]) == 2
    err = capsys.readouterr().err
    assert "no CUDA GPU is available here" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--parts", "mm,matmul"], "calibrate parts 'matmul'"),
        (["--parts", ""], "calibrate parts none"),
        (["--no-save", "--out", "x.json"], "--no-save writes nothing"),
    ],
)
def test_bad_flags_are_refused_before_any_measuring(capsys, argv, said) -> None:
    assert main(["calibrate", *argv]) == 1
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err


def _measured(mm_factor: float, host_factor: float) -> dict:
    data = json.loads(json.dumps(shipped()["h200"]))
    data["curves"]["mm:bf16"] = [[w, t / mm_factor] for w, t in data["curves"]["mm:bf16"]]
    data["host"] = {k: v * host_factor for k, v in data["host"].items()}
    data["source"] = "measured on a test"
    data["measured"] = {
        "parts": ["mm", "host"],
        "kept": ["attn", "mem"],
        "seconds": 12.0,
        "host": {"factors": {"all": host_factor, "eager": host_factor}},
    }
    return data


def test_the_rendering_sets_this_machine_beside_memfits() -> None:
    out = io.StringIO()
    console = Console(file=out, width=140)
    render_calibration(_measured(0.5, 1.3), shipped()["h200"], "/tmp/x.json", console)
    text = out.getvalue()
    assert "written to /tmp/x.json" in text
    assert "0.50x" in text  # the bf16 products at half memfit's rate
    assert "1.30x memfit's" in text and "Kept from memfit's calibration: attn, mem" in text


def _linear_plan(**kwargs: object) -> memfit.Plan:
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256))
    return memfit.plan(
        model,
        batch_of=lambda n: torch.randn(n, 256),
        budget="8GiB",
        global_batch=8,
        batch_size=8,
        precisions=("fp32",),
        checkpointing=(False,),
        optimizers=("adamw",),
        workers=1,
        loss_fn=lambda m, b: m(b).sum(),
        **kwargs,  # type: ignore[arg-type]
    )


def test_a_plan_times_its_candidates_with_the_calibration_given(tmp_path: Path) -> None:
    path = save_calibration(_measured(1.0, 3.0), tmp_path / "slow-host.json")
    ours, mine = _linear_plan(), _linear_plan(calibration=path)
    assert ours.chosen is not None and mine.chosen is not None
    # a tiny step waits on the host: three times the host's costs, about three times the step
    assert mine.chosen.step_seconds > 2.5 * ours.chosen.step_seconds
    assert any(str(path) in n for n in mine.notes)
    assert mine.calibration == "measured on a test"


def test_plan_refuses_a_calibration_file_that_is_not_one(capsys, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"gpu": "x"}')
    assert (
        main(["plan", "gpt2", "-b", "8", "-s", "128", "--gpu", "24GiB", "--calibration", str(bad)])
        == 2
    )
    err = capsys.readouterr().err
    assert "is not a step-time calibration" in err and str(bad) in err


def test_list_shows_the_saved_calibrations_without_a_gpu(capsys, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("MEMFIT_CALIBRATION_DIR", str(tmp_path))
    assert main(["calibrate", "--list"]) == 0
    assert "No calibration saved in" in capsys.readouterr().out
    where = save_calibration(_measured(1.0, 1.0))
    assert main(["calibrate", "--list", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row == {
        "key": "h200",
        "gpu": "NVIDIA H200",
        "source": "measured on a test",
        "path": str(where),
    }
    assert main(["calibrate", "--list"]) == 0
    out = capsys.readouterr().out
    assert "h200" in out and "measured on a test" in out


def test_plan_refuses_a_calibration_that_is_not_a_path() -> None:
    with pytest.raises(memfit.InvalidInputError, match="calibration=12 is not a file"):
        _linear_plan(calibration=12)
