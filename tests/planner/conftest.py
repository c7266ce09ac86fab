"""Fixtures of the planner's tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def fit() -> Iterator[Any]:
    """``benchmarks/calibration_fit.py``, imported from its directory."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import calibration_fit

        yield calibration_fit
    finally:
        sys.path.remove(str(BENCHMARKS))
