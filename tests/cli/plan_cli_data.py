"""What the ``memfit plan`` tests share: the hand-made plans of ``tests/report/plan_data.py``
and a stand-in for ``memfit.planner.plan`` that returns one and records its call."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))

from plan_data import fitting_plan, nothing_fits_plan

from memfit.planner import Plan

__all__ = ["FakePlanner", "fitting_plan", "nothing_fits_plan"]


class FakePlanner:
    """Replaces ``memfit.planner.plan``: reports progress three times and returns ``plan``;
    ``calls`` holds the keyword arguments of each call."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, plan: Plan | None = None) -> None:
        self.plan = plan or fitting_plan()
        self.calls: list[dict[str, Any]] = []
        monkeypatch.setattr("memfit.planner.plan", self, raising=False)

    def __call__(self, model: str, batch: object = None, **kwargs: Any) -> Plan:
        self.calls.append({"model": model, **kwargs})
        progress = kwargs.get("progress")
        if progress is not None:
            for i in range(3):
                progress(i + 1, 3, f"candidate {i + 1}")
        return self.plan
