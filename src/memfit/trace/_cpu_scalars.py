"""A CPU scalar tensor beside CUDA tensors, as CUDA takes it.

A CUDA kernel accepts a 0-dimensional CPU tensor among its CUDA arguments and reads it as a
number (``x.masked_fill(mask, torch.tensor(-inf))``, as transformers' SEW-D writes it); it
allocates nothing on the GPU for it. Some meta kernels refuse it ("Expected `value` to be on
same device as `a`"). Where one does, the op runs again with each such scalar as a
0-dimensional meta tensor, made outside the recorder: the GPU allocates nothing for it, and
neither does the trace.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

__all__ = ["call_with_cpu_scalars"]


def call_with_cpu_scalars(
    call: Callable[..., Any], func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``call(func, args, kwargs)``; where it raises and a CPU scalar tensor sits beside meta
    tensors, once more with those scalars on the meta device."""
    try:
        return call(func, args, kwargs)
    except (RuntimeError, ValueError):
        if not _mixes_cpu_scalars(args, kwargs):
            raise
    args, kwargs = tree_map(_as_meta_scalar, (args, kwargs))
    return call(func, args, kwargs)


def _is_cpu_scalar(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.dim() == 0


def _mixes_cpu_scalars(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    leaves, _ = tree_flatten((args, kwargs))
    tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
    return any(t.device.type == "meta" for t in tensors) and any(map(_is_cpu_scalar, tensors))


def _as_meta_scalar(t: Any) -> Any:
    return torch.empty((), dtype=t.dtype, device="meta") if _is_cpu_scalar(t) else t
