"""What the op sweep's tests share: the sweep's modules (``benchmarks/``) importable, PyTorch's
OpInfo sample type, and a stand-in OpInfo that calls a function on a sample."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import op_sweep_cases as cases
from op_sweep_compare import tokens
from op_sweep_sides import trace_case

cases.testing_importable()
from torch.testing._internal.opinfo.core import SampleInput  # noqa: E402

__all__ = ["Op", "SampleInput", "cases", "tokens", "trace_case"]


class Op:
    """A stand-in OpInfo: calls ``fn`` on a sample, as OpInfo's ``__call__`` does."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def __call__(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        return self.fn(x, *args, **kwargs)
