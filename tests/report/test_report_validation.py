"""``memfit validate``'s table, from a Validation built on the CPU (no GPU needed)."""

from __future__ import annotations

import dataclasses
import io

import torch
from rich.console import Console

import memfit
from memfit.estimator import Measurement, Validation, Versions
from memfit.report import render_validation
from memfit.report._validation import DIFFERS


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
        versions=Versions(torch="2.11.0+cu130", transformers="5.17.0"),
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


def _with_versions(assumed: Versions, host: Versions) -> Validation:
    result = _validation(context=None)
    estimate = dataclasses.replace(result.estimate, versions=assumed)
    return Validation(estimate, dataclasses.replace(result.measured, versions=host))


def _row(text: str, library: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"│ {library} "))


def test_versions_assumed_beside_the_gpu_hosts_and_differences_marked():
    assumed = Versions(torch="2.14.1+cpu", transformers="5.24.0", timm="1.0.31")
    host = Versions(torch="2.14.1+cu130", transformers="5.17.0", torchvision="0.26.0")
    text = _text(_with_versions(assumed, host))
    assert "library versions" in text and "estimate assumed" in text and "GPU host" in text
    # the same release in another build (+cpu, +cu130) is not a difference
    assert "2.14.1+cpu" in _row(text, "torch") and DIFFERS not in _row(text, "torch")
    row = _row(text, "transformers")
    assert "5.24.0" in row and "5.17.0" in row and DIFFERS in row
    assert "not installed" in _row(text, "timm") and DIFFERS in _row(text, "timm")
    assert DIFFERS in _row(text, "torchvision")
    assert "Memory depends on library versions" in text


def test_equal_versions_are_not_marked():
    same = Versions(torch="2.11.0+cu130", transformers="5.17.0")
    text = _text(_with_versions(same, same))
    assert DIFFERS not in text and "Memory depends on library versions" not in text


def test_json_holds_the_versions_of_both_sides():
    data = _with_versions(Versions(torch="2.14.1"), Versions(torch="2.11.0")).to_dict()
    assert data["estimate"]["versions"]["torch"] == "2.14.1"
    assert data["measured"]["versions"] == {
        "torch": "2.11.0",
        "transformers": None,
        "timm": None,
        "torchvision": None,
    }
