"""A library first imported while memfit builds a model keeps ordinary module tensors: an
estimate must not leave meta tensors in the user's modules (torchaudio's ``kaldi.EPSILON`` did,
imported by transformers inside the build)."""

from __future__ import annotations

import importlib
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch import nn

import memfit
from memfit.workload._first_imports import _Finder, _Loader, imports_outside_modes


@pytest.fixture
def fresh_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The name of a module not imported yet, whose code makes a tensor at import time."""
    name = f"lazy_constant_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text("import torch\nEPS = torch.tensor(1e-6)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield name
    sys.modules.pop(name, None)


def _net_importing(name: str) -> type[nn.Module]:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.constants = importlib.import_module(name)  # first imported in the build
            self.lin = nn.Linear(64, 64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x) * self.constants.EPS.to(x.device)

    return Net


def test_an_estimate_leaves_a_module_imported_in_the_build_with_a_cpu_tensor(
    fresh_module: str,
) -> None:
    est = memfit.estimate(_net_importing(fresh_module), lambda: torch.randn(4, 64))
    module = sys.modules[fresh_module]
    assert module.EPS.device == torch.device("cpu")
    assert float(module.EPS + 1) == pytest.approx(1.000001)
    assert est.peak_allocated > 0


def test_a_module_first_imported_in_the_forward_keeps_a_cpu_tensor(fresh_module: str) -> None:
    # the step runs under memfit's modes but no device context: a tensor made on the CPU stays
    # an ordinary one (this holds without the build's finder; kept so that it keeps holding)
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(64, 64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            constants = importlib.import_module(fresh_module)  # first imported in the step
            return self.lin(x) * constants.EPS.to(x.device)

    memfit.estimate(Net, lambda: torch.randn(4, 64))
    assert sys.modules[fresh_module].EPS.device == torch.device("cpu")


def test_the_module_keeps_the_loader_that_found_it(fresh_module: str) -> None:
    with torch.device("meta"), imports_outside_modes():
        module: ModuleType = importlib.import_module(fresh_module)
    assert module.EPS.device == torch.device("cpu")
    assert not isinstance(module.__loader__, _Loader)
    assert module.__spec__ is not None and not isinstance(module.__spec__.loader, _Loader)


def test_outside_the_build_imports_are_left_alone(fresh_module: str) -> None:
    with imports_outside_modes():
        pass
    assert not any(isinstance(f, _Finder) for f in sys.meta_path)
    with torch.device("meta"):
        module = importlib.import_module(fresh_module)
    assert module.EPS.device == torch.device("meta")  # torch's own behaviour, unchanged
