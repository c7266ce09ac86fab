"""``memfit calibrate``'s host part: the factor per kind of step from reference steps, and the
host costs it scales (the measuring itself needs a GPU: tests/gpu/test_calibrate_gpu.py)."""

from __future__ import annotations

import pytest

from memfit.planner.calibration import shipped
from memfit.planner.calibration._host_scale import HostRow, host_factors, scaled_host


def _row(style: str, measured: float, predicted: float = 1.0) -> HostRow:
    return HostRow("m", "v", style, measured, predicted)


def test_each_kind_of_step_takes_the_median_of_its_rows() -> None:
    rows = [
        _row("eager", 2.0),
        _row("eager", 2.2),
        _row("eager", 9.0),  # one slow row does not move a median of three much
        _row("checkpointed", 0.5),
        _row("fp32", 3.0, 2.0),
    ]
    factors = host_factors(rows)
    assert factors["eager"] == pytest.approx(2.2)
    assert factors["checkpointed"] == pytest.approx(0.5)
    assert factors["fp32"] == pytest.approx(1.5)
    assert "selective" not in factors  # none measured: scaled by all's
    assert factors["all"] == pytest.approx(2.0)


def test_no_rows_is_an_error_not_a_factor_of_one() -> None:
    with pytest.raises(ValueError, match="no reference step"):
        host_factors([])


def test_the_costs_are_scaled_by_their_kind_of_step() -> None:
    host = shipped()["h200"]["host"]
    factors = {"all": 3.0, "eager": 2.0, "checkpointed": 0.5}
    out = scaled_host(host, factors)
    assert set(out) == set(host)
    assert out["forward"] == pytest.approx(2.0 * host["forward"])
    assert out["backward:conv"] == pytest.approx(2.0 * host["backward:conv"])
    assert out["forward:checkpointed"] == pytest.approx(0.5 * host["forward:checkpointed"])
    assert out["backward:conv:checkpointed"] == pytest.approx(
        0.5 * host["backward:conv:checkpointed"]
    )
    assert out["forward:selective"] == pytest.approx(3.0 * host["forward:selective"])
    assert out["optimizer_param"] == pytest.approx(3.0 * host["optimizer_param"])
    assert out["zero_grad:checkpointed"] == pytest.approx(0.5 * host["zero_grad:checkpointed"])
    assert out["default"] == pytest.approx(2.0 * host["default"])


def test_each_reference_step_is_predicted_from_its_own_trace(monkeypatch) -> None:
    # the GPU's part stood in for: every phase "took" 1 ms on the host
    from memfit._gpus import resolve_gpu
    from memfit.planner import calibration_for
    from memfit.planner.calibration import _host_scale

    monkeypatch.setattr(
        _host_scale, "phase_seconds", lambda w: ({}, {"forward": 1e-3, "backward": 1e-3})
    )
    said: list[str] = []
    cal = calibration_for(resolve_gpu("h200"))[0]
    rows = _host_scale.measure_rows(resolve_gpu("h200"), cal, ["gpt2"], said.append)
    assert [r.variant for r in rows] == list(_host_scale.VARIANTS)
    assert [r.style for r in rows] == ["fp32", "eager", "checkpointed", "selective"]
    assert all(r.measured == pytest.approx(2e-3) for r in rows)
    # GPT-2 at a batch of one issues a few hundred ops a phase: milliseconds on the host, and
    # a checkpointed backward runs its forward again
    assert all(1e-3 < r.predicted < 0.2 for r in rows)
    eager, checkpointed = rows[1], rows[2]
    assert checkpointed.predicted > 1.2 * eager.predicted
    assert said == [f"host: gpt2 {v}" for v in _host_scale.VARIANTS]


def test_a_reference_step_that_fails_is_left_out_and_said(monkeypatch) -> None:
    from memfit._gpus import resolve_gpu
    from memfit.planner import calibration_for
    from memfit.planner.calibration import _host_scale

    def broken(workload: object) -> None:
        raise RuntimeError("no kernel image is available")

    monkeypatch.setattr(_host_scale, "phase_seconds", broken)
    said: list[str] = []
    cal = calibration_for(resolve_gpu("h200"))[0]
    assert _host_scale.measure_rows(resolve_gpu("h200"), cal, ["gpt2"], said.append) == []
    assert len(said) == 4 and "no kernel image" in said[0]
