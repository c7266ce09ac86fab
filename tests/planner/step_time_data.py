"""Helpers of the step-time model's tests: a made-up calibration and ops by phase."""

from __future__ import annotations

from memfit.planner import Calibration
from memfit.trace import PhaseCost, StepCosts

US = 1e-6


def calibration(**host: float) -> Calibration:
    return Calibration(
        gpu="test",
        source="made up for the test",
        curves={"mm:bf16": ((1e9, 10 * US), (1e12, 2000 * US))},
        kernel_floor=1 * US,
        bandwidth=1e12,  # 1 byte per picosecond: 1 MB takes 1 us
        host={"default": 10 * US, "optimizer_param": 0.0, **host},
        h2d=1e-9,
    )


def costs(**phases: list[tuple[str, int, int]]) -> StepCosts:
    return StepCosts({f"step2.{name}": PhaseCost(list(ops)) for name, ops in phases.items()})
