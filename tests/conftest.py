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
    """The planner reads calibrations ``memfit calibrate`` saved on this machine, and the trace
    the convolution workspaces ``--probe-convolutions`` kept: the tests (and the processes they
    start) see empty folders of their own, never the developer's.
    Session-wide, so that module fixtures that plan see it too."""
    folders = {"MEMFIT_CALIBRATION_DIR": "calibrations", "MEMFIT_CUDNN_DIR": "cudnn"}
    before = {name: os.environ.get(name) for name in folders}
    for name, kind in folders.items():
        os.environ[name] = str(tmp_path_factory.mktemp(kind))
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
