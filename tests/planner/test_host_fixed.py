"""A phase's host cost whatever its ops (the step-time model): fitted where
the tiny workloads ran at two depths, charged once per micro-batch of a phase; a calibration
without it (the shipped one) charges none."""

from __future__ import annotations

from typing import Any

import pytest
from step_time_data import US, calibration, costs

from memfit.planner import calibration_for, step_time

MEM = ("mem", 0, 0)


def _row(fit: Any, model: str, ops: int, forward: float) -> Any:
    seconds = {"forward": forward, "backward": ops * 10 * US, "optimizer": 100 * US}
    counts = {"forward": ops, "backward": ops, "optimizer": 10}
    return fit.TinyRow(model, "eager", seconds, counts, dict.fromkeys(seconds, 0), 10)


def test_two_depths_split_a_phase_into_a_fixed_part_and_a_cost_per_op(fit: Any) -> None:
    # forward: 1 ms a phase and 15 us an op; backward: 10 us an op and nothing fixed
    rows = [
        _row(fit, m, n, 1000 * US + n * 15 * US)
        for m, n in (("gpt2", 100), ("gpt2-8", 400), ("bert", 120), ("bert-8", 480))
    ]
    host = fit.fit_host(rows)
    assert host["forward"] == pytest.approx(15 * US)
    assert host["forward:fixed"] == pytest.approx(1000 * US)
    assert host["backward"] == pytest.approx(10 * US)
    assert "backward:fixed" not in host  # none seen: the median per op stays
    # one op count alone cannot tell them apart: the median per op, as before
    alone = fit.fit_host([r for r in rows if r.model == "gpt2"])
    assert "forward:fixed" not in alone
    assert alone["forward"] == pytest.approx(25 * US)


def test_the_fixed_part_is_paid_once_per_micro_batch_of_a_phase() -> None:
    cal = calibration(**{"forward:fixed": 500 * US, "forward:fixed:checkpointed": 800 * US})
    ops = costs(forward=[MEM] * 4, backward=[MEM] * 4)
    plain = step_time(ops, calibration(), style="eager")
    got = step_time(ops, cal, style="eager")
    assert got.host_busy == pytest.approx(plain.host_busy + 500 * US)
    got = step_time(ops, cal, style="eager", micro_batches=(1, 4))
    assert got.host_busy == pytest.approx(4 * plain.host_busy + 4 * 500 * US)
    got = step_time(ops, cal, style="checkpointed")
    assert got.host_busy == pytest.approx(plain.host_busy + 800 * US)


def test_the_shipped_calibration_has_no_fixed_part() -> None:
    from memfit._gpus import resolve_gpu

    cal, _ = calibration_for(resolve_gpu("h200"))
    assert cal.host_fixed("forward", "eager") == 0.0
