"""The tensors inside an op's arguments or outputs, found faster than ``torch.utils._pytree``.

What reaches the trace's dispatch (an ATen op's arguments and results) nests tensors only in
tuples (named tuples and ``torch.return_types`` included), lists and dicts; pytree's generic
walk, which asks a registry about every node, was a tenth of a large model's trace.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["tensors_in"]


def tensors_in(value: Any) -> list[torch.Tensor]:
    """Every tensor in ``value`` (nested tuples, lists and dict values), in order."""
    out: list[torch.Tensor] = []
    _collect(value, out)
    return out


def _collect(value: Any, out: list[torch.Tensor]) -> None:
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (tuple, list)):
        for item in value:
            _collect(item, out)
    elif isinstance(value, dict):
        for item in value.values():
            _collect(item, out)
