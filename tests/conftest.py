"""Shared fixtures and the ``gpu`` marker's skip rule."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _no_saved_calibrations(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The planner reads calibrations ``memfit calibrate`` saved on this machine: the tests
    (and the processes they start) see an empty folder of their own, never the developer's.
    Session-wide, so that module fixtures that plan see it too."""
    before = os.environ.get("MEMFIT_CALIBRATION_DIR")
    os.environ["MEMFIT_CALIBRATION_DIR"] = str(tmp_path_factory.mktemp("calibrations"))
    yield
    if before is None:
        os.environ.pop("MEMFIT_CALIBRATION_DIR", None)
    else:
        os.environ["MEMFIT_CALIBRATION_DIR"] = before
