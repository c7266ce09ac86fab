"""``F.mish`` with CUDA's backward.

CUDA runs ``mish_backward`` as one fused kernel that allocates the input's gradient alone. It
has no meta kernel, and torch forbids registering one (it has a CompositeImplicitAutograd
kernel), so on meta tensors it decomposes below the trace into softplus, tanh, sigmoid and
six products, four of them input-sized temporaries alive at once (H100 op sweep, torch 2.11:
three input-sized allocations in a mish forward and backward, the trace ten). The function
below is mish with a backward that allocates what the kernel does; under ``create_graph``
(grad mode on in backward) PyTorch itself runs the decomposition, and so does this backward.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["mish"]


class _Mish(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        out: torch.Tensor = torch._C._nn.mish(x)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        if torch.is_grad_enabled():  # differentiable: the formula PyTorch runs then
            tanh_softplus = torch.tanh(F.softplus(x))
            sigmoid = torch.sigmoid(x)
            slope: torch.Tensor = x * sigmoid * (1 - tanh_softplus * tanh_softplus)
            return grad * (tanh_softplus + slope)
        return torch.empty_like(x, memory_format=torch.contiguous_format)


def mish(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    """``F.mish(input, inplace=False)`` through :class:`_Mish` where a gradient will be
    taken of a traced (meta) tensor; None where the call is left as it is (in place, no
    gradient, or a tensor with values, whose gradient must be computed)."""
    x = args[0] if args else kwargs.get("input")
    inplace = args[1] if len(args) > 1 else kwargs.get("inplace", False)
    if not isinstance(x, torch.Tensor) or inplace or x.device.type != "meta":
        return None
    if not (x.requires_grad and torch.is_grad_enabled()):
        return None
    out: torch.Tensor = _Mish.apply(x)
    return out
