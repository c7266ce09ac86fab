"""What CUDA's group norm allocates beyond its outputs (ATen's group_norm_kernel.cu, torch
2.11), in float32 for half-precision inputs (the accumulation type):

* forward, with a weight or a bias and more than one element per channel: a scale and a shift
  per (sample, channel), ``a`` and ``b``, freed when it returns;
* backward: ``ds`` and ``db`` per (sample, channel); for the input gradient ``c2`` and ``c3``
  per (sample, group) and, with a weight and more than one element per channel, ``c1`` per
  (sample, channel); ``ds`` and ``db`` are held until the kernel returns, and go last.

H100 op sweep: 80 samples of 80 channels in fp32, 25,600 bytes each for ``a``, ``b``, ``ds``,
``db`` and ``c1``, 320 for ``c2`` and ``c3``. Inputs in channels-last are not modelled.
"""

from __future__ import annotations

from typing import Any

import torch

from memfit.trace._scratch import Scratch

__all__ = ["GROUP_NORM_OPS", "group_norm_scratch"]

aten = torch.ops.aten

GROUP_NORM_OPS = frozenset(
    {aten.native_group_norm.default, aten.native_group_norm_backward.default}
)


def _acc_size(x: torch.Tensor) -> int:
    return 4 if x.dtype in (torch.float16, torch.bfloat16) else x.element_size()


def group_norm_scratch(func: Any, args: tuple[Any, ...]) -> list[list[Scratch]]:
    """The scratch of ``native_group_norm`` or its backward (module doc)."""
    if func is aten.native_group_norm.default:
        x, weight, bias = args[0], args[1], args[2]
        n, c, hxw = int(args[3]), int(args[4]), int(args[5])
        if n == 0 or hxw == 1 or (weight is None and bias is None):
            return []
        per_channel = n * c * _acc_size(x)
        return [[(per_channel, "group norm scale"), (per_channel, "group norm shift")]]
    x, weight = args[1], args[4]
    n, c, hxw, groups = int(args[5]), int(args[6]), int(args[7]), int(args[8])
    mask = args[9] if len(args) > 9 else (True, True, True)
    if n == 0:
        return []
    acc = _acc_size(x)
    group: list[Scratch] = [
        (n * c * acc, "group norm backward ds", True),
        (n * c * acc, "group norm backward db", True),
    ]
    if mask[0]:
        group += [
            (n * groups * acc, "group norm backward c2"),
            (n * groups * acc, "group norm backward c3"),
        ]
        if hxw != 1 and weight is not None:
            group.append((n * c * acc, "group norm backward c1", True))
    return [group]
