"""Fixtures for the snapshot tests (data and helpers live in ``snapshot_data``)."""

from __future__ import annotations

import gzip
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from snapshot_data import fragmenting_events

from memfit._events import MemoryEvent
from memfit.snapshot._record import synthetic_snapshot


@pytest.fixture
def write_snapshot(tmp_path: Path) -> Callable[..., Path]:
    """Write a synthetic snapshot of ``events`` (default: a fragmenting trace) to a file."""

    def write(
        events: list[MemoryEvent] | None = None,
        config: str = "",
        name: str = "snap.pickle",
        **kwargs: Any,
    ) -> Path:
        data = synthetic_snapshot(
            events if events is not None else fragmenting_events(), config, **kwargs
        )
        path = tmp_path / name
        opener = gzip.open if name.endswith(".gz") else open
        with opener(path, "wb") as fh:
            pickle.dump(data, fh)
        return path

    return write
