"""Helpers over the recorded NVML fixtures (``benchmarks/nvml_record.py`` on an H200)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from memfit.monitor import Monitor, Replay

FIXTURES = Path(__file__).parent / "fixtures"
H200 = FIXTURES / "nvml-h200.json.gz"
MISSING = (
    "tests/monitor/fixtures/nvml-h200.json.gz is not recorded yet: run "
    "benchmarks/nvml_record.py --out nvml-h200.json.gz on the GPU machine and commit it"
)


def replay_monitor(doc: dict[str, Any], scenario: str, start: int = 0, **kw: Any) -> Monitor:
    """A monitor over one recorded scenario, starting at sample ``start``, not looping."""
    replay = Replay(doc, scenario, start=start, loop=False)
    return Monitor(replay, procs=replay.procs, published=replay.published, **kw)


def with_error(doc: dict[str, Any], scenario: str, index: int, keys: list[str], error: str):
    """A copy of ``doc`` whose ``keys`` answer ``error`` on GPU ``index`` in every sample of
    ``scenario`` (for failures the recording does not have: a GPU that falls off the bus)."""
    doc = copy.deepcopy(doc)
    for s in doc["scenarios"]:
        if s["name"] == scenario:
            for sample in s["samples"]:
                for key in keys:
                    sample["devices"][index][key] = {"error": error, "message": error}
    return doc


def recorded(doc: dict[str, Any], scenario: str) -> list[dict[str, Any]]:
    return next(s["samples"] for s in doc["scenarios"] if s["name"] == scenario)


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=1)[:3000]
