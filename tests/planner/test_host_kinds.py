"""The host's extra cost per convolution call (the step-time model): the calibration fit
that separates it from the base per-op cost, and the model that charges it per op kind, with
calibrations fitted before it (no ``phase:conv`` key) behaving as they did."""

from __future__ import annotations

from typing import Any

import pytest
from step_time_data import US, calibration, costs

from memfit._gpus import resolve_gpu
from memfit.planner import Calibration, calibration_for, step_time


def row(fit: Any, model: str, style: str, convs: int, **seconds: float) -> Any:
    """A tiny row of 100 ops per phase (``convs`` of them convolutions in forward and
    backward) and ``10 + convs`` parameter tensors, its optimizer 8 us per op and 11 us per
    parameter tensor."""
    params = 10 + convs
    phases = {**seconds, "optimizer": params * 11 * US + 100 * 8 * US}
    ops = dict.fromkeys(phases, 100)
    calls = {p: convs if p in ("forward", "backward") else 0 for p in phases}
    return fit.TinyRow(model, style, phases, ops, calls, params)


def test_the_fit_keeps_the_pooled_base_and_charges_eager_steps_an_extra_per_call(
    fit: Any,
) -> None:
    rows = [
        # forward 20 us per op (GPT-2, BERT, ResNet: the median of all three), backward 10 us
        row(fit, "gpt2", "eager", 0, forward=2000 * US, backward=1000 * US),
        row(fit, "bert", "eager", 0, forward=1000 * US, backward=1000 * US),
        # 10 convolutions: 50 us more each forward, 100 us backward
        row(fit, "resnet", "eager", 10, forward=2500 * US, backward=2000 * US),
        row(fit, "gpt2", "selective", 0, forward=3000 * US, backward=1000 * US),
        row(fit, "bert", "selective", 0, forward=3000 * US, backward=1000 * US),
        # selective: 300 us more per convolution forward, 200 us backward
        row(fit, "resnet", "selective", 10, forward=6000 * US, backward=3000 * US),
    ]
    host = fit.fit_host(rows)
    assert host["forward"] == pytest.approx(20 * US)  # as before the extra existed
    assert host["forward:selective"] == pytest.approx(30 * US)
    assert host["backward"] == pytest.approx(10 * US)
    assert host["forward:conv"] == pytest.approx(50 * US)  # eager's under the bare phase
    assert host["backward:conv"] == pytest.approx(100 * US)
    # a checkpointing style's remainder is its blocks' checkpointing, not a call's: eager's
    assert "forward:conv:selective" not in host and "backward:conv:selective" not in host
    assert host["default"] == host["forward"]
    assert host["optimizer"] == pytest.approx(8 * US)
    assert host["optimizer_param"] == pytest.approx(11 * US)


def test_without_convolutions_the_fit_is_the_pooled_median_and_has_no_extra(fit: Any) -> None:
    rows = [
        row(fit, "gpt2", "eager", 0, forward=2000 * US, backward=1000 * US),
        row(fit, "bert", "eager", 0, forward=4000 * US, backward=3000 * US),
    ]
    host = fit.fit_host(rows)
    assert host["forward"] == pytest.approx(30 * US)
    assert not [k for k in host if ":conv" in k]


def test_the_extra_is_not_negative(fit: Any) -> None:
    rows = [
        row(fit, "gpt2", "eager", 0, forward=4000 * US, backward=1000 * US),
        row(fit, "resnet", "eager", 10, forward=3000 * US, backward=1000 * US),
    ]
    host = fit.fit_host(rows)  # base 35 us forward: the ResNet row leaves -50 us per call
    assert host["forward:conv"] == 0.0


# small ops: the host's time decides the step; the GPU runs the last one 1 us after its issue
CONV = ("conv:k3:bf16", 1000, 0)
CONV_BWD = ("conv_bwd:k3s2:bf16", 1000, 0)
MEM = ("mem", 0, 0)


def test_the_host_pays_the_extra_for_each_convolution_call_of_its_phase_and_style() -> None:
    cal = calibration(
        **{"forward:conv": 40 * US, "backward:conv": 90 * US, "forward:conv:selective": 70 * US}
    )
    got = step_time(costs(forward=[CONV, MEM, CONV, MEM]), cal, style="eager")
    assert got.host_busy == pytest.approx(4 * 10 * US + 2 * 40 * US)
    got = step_time(costs(forward=[CONV, MEM, CONV, MEM]), cal, style="selective")
    assert got.host_busy == pytest.approx(4 * 10 * US + 2 * 70 * US)
    got = step_time(costs(forward=[CONV, MEM]), cal, style="fp32")
    assert got.host_busy == pytest.approx(2 * 10 * US + 40 * US)  # no fp32 key: eager's
    got = step_time(costs(backward=[CONV_BWD, MEM, CONV]), cal, style="eager")
    assert got.host_busy == pytest.approx(3 * 10 * US + 2 * 90 * US)  # a recompute's too
    got = step_time(costs(optimizer=[CONV, MEM]), cal, style="eager")
    assert got.host_busy == pytest.approx(2 * 10 * US)  # no optimizer:conv: none


def test_a_calibration_without_the_extra_charges_a_convolution_as_any_op() -> None:
    ops = [CONV, CONV_BWD, MEM, ("mm:bf16", 1000, 0)]
    got = step_time(costs(forward=ops, backward=ops), calibration(), style="eager")
    assert got.host_busy == pytest.approx(8 * 10 * US)
    old = {"gpu": "t", "source": "s", "curves": {}, "kernel_floor": 1e-6, "bandwidth": 1e12}
    loaded = Calibration.from_dict({**old, "host": {"default": 1e-5, "forward": 2e-5}})
    assert loaded.host_per_conv("forward", "selective") == 0.0


def test_the_shipped_h200_calibration_charges_convolution_calls() -> None:
    cal, _ = calibration_for(resolve_gpu("h200"))
    for style in ("eager", "fp32", "checkpointed", "selective"):
        assert cal.host_per_conv("forward", style) > 0
        assert cal.host_per_conv("backward", style) > 0
    assert cal.host_per_conv("optimizer", "eager") == 0.0


def test_a_calibration_reads_back_what_to_dict_writes():
    cal, _ = calibration_for(resolve_gpu("h200"))
    again = Calibration.from_dict(cal.to_dict())
    assert again == cal
    assert again.to_dict() == cal.to_dict()
