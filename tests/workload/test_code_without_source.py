"""A model class defined where Python keeps no source file (a notebook cell, ``python -c``, a
module made at run time) is estimated like any other: memfit only looks for the file to name
the user's line in an error."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from memfit import UserCodeError, estimate

CELL = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        return self.proj(x)

class Broken(nn.Module):
    def __init__(self):
        super().__init__()
        raise ValueError("no such layer")
"""


@pytest.fixture
def cell(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    module = types.ModuleType("__main__")  # no __file__: a notebook's, or python -c's
    monkeypatch.setitem(sys.modules, "__main__", module)
    exec(CELL, module.__dict__)
    return module


def test_a_model_class_without_a_source_file_is_estimated(cell: types.ModuleType):
    assert estimate(cell.Net, lambda: torch.randn(2, 4)).peak_allocated > 0


def test_its_own_error_is_still_the_users(cell: types.ModuleType):
    with pytest.raises(UserCodeError, match="no such layer"):
        estimate(cell.Broken, lambda: torch.randn(2, 4))
