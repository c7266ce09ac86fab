"""Fixtures shared by the command-line tests."""

from __future__ import annotations

from pathlib import Path

import pytest

TINY = """\
import torch


def make():
    return torch.nn.Sequential(torch.nn.Linear(8, 8))


def make_batch(n, seq_len):
    return torch.randn(n, 8)
"""


@pytest.fixture
def tiny(tmp_path: Path) -> str:
    """A model of one small layer, as ``file.py:make``: its trace takes a fraction of a second."""
    path = tmp_path / "tiny.py"
    path.write_text(TINY)
    return f"{path}:make"
