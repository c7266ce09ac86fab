"""The recorded NVML fixture (``benchmarks/nvml_record.py`` on an H200), loaded once."""

from __future__ import annotations

from typing import Any

import pytest
from monitor_data import H200, MISSING

from memfit.monitor import load_recording


@pytest.fixture(scope="session")
def recording() -> dict[str, Any]:
    """The single-H200 recording: scenarios idle, train, train+infer, infer-exits."""
    if not H200.exists():
        pytest.skip(MISSING)
    return load_recording(H200)
