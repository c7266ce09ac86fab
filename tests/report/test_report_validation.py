"""``memfit validate``'s table, from a Validation built on the CPU (no GPU needed)."""

from __future__ import annotations

import io

import torch
from rich.console import Console

import memfit
from memfit.estimator import Measurement, Validation
from memfit.report import render_validation


def _validation(context: int | None) -> Validation:
    def linear() -> torch.nn.Module:
        return torch.nn.Linear(64, 64)

    est = memfit.estimate(linear, torch.randn(4, 64), optimizer="sgd", gpu="1GiB")
    measured = Measurement(
        peak_allocated=est.peak_allocated * 2,
        peak_reserved=est.peak_reserved,
        setup_allocated=0,
        nvml_process=None if context is None else context + est.peak_reserved,
        context=context,
        step_seconds=0.01,
        gpu_name="NVIDIA H200",
        torch_version="2.11.0+cu130",
        allocator_config="",
    )
    return Validation(est, measured)


def _text(result: Validation) -> str:
    out = io.StringIO()
    render_validation(result, Console(file=out, width=100))
    return out.getvalue()


def test_each_figure_with_its_error():
    result = _validation(context=700 * 2**20)
    text = _text(result)
    assert "linear: estimate vs NVIDIA H200, torch 2.11.0+cu130" in text
    assert "-50.00%" in text  # allocated: half of what was measured
    assert "+0.00%" in text  # reserved: the same
    assert "non-PyTorch (NVML - reserved)" in text
    assert Validation.error(100, 50) == 1.0 and Validation.error(1, None) is None


def test_no_nvml_row_without_nvml():
    assert "non-PyTorch" not in _text(_validation(context=None))


def test_json_holds_both_sides():
    data = _validation(context=None).to_dict()
    assert set(data) == {"estimate", "measured"}
    assert data["measured"]["gpu_name"] == "NVIDIA H200"
