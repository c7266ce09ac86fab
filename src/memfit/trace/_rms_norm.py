"""``torch.rms_norm`` (``F.rms_norm``, ``nn.RMSNorm``) as CUDA runs it: one fused kernel.

On a CUDA tensor ATen's ``rms_norm`` calls ``_fused_rms_norm``, whose CUDA kernel allocates the
output and a float32 ``rstd`` (one a row) and nothing else; autograd keeps the input, the
weight and ``rstd``, and the backward is ``_fused_rms_norm_backward`` (the input's and the
weight's gradients). On meta tensors ``_fused_rms_norm`` has no kernel of its own, so its
composite runs instead, above the trace: an upcast copy, ``pow``, ``mean``, ``rsqrt`` and two
products, all saved for a backward of a dozen more ops (H100 op sweep, torch 2.11: 2 blocks in
the forward where the trace made 6, 3 in the backward where it made 30).

Here the fused op is called below autograd, where the trace's dispatch mode sees it whole,
inside an autograd function whose backward calls ``_fused_rms_norm_backward``. ATen takes the
composite itself for a channels-last or complex input and a weight of another dtype: those
calls are left as they are.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["fused_rms_norm"]

_FUSED = getattr(torch.ops.aten, "_fused_rms_norm", None)
_CHANNELS_LAST = (torch.channels_last, torch.channels_last_3d)
_FUSED_BACKWARD = getattr(torch.ops.aten, "_fused_rms_norm_backward", None)


def _below_autograd(
    x: torch.Tensor, shape: list[int], weight: torch.Tensor | None, eps: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    assert _FUSED is not None
    with torch._C._AutoDispatchBelowAutograd():
        out, rstd = _FUSED.default(x, shape, weight, eps)
    return out, rstd


class _FusedRmsNorm(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor | None,
        shape: list[int],
        eps: float | None,
    ) -> torch.Tensor:
        out, rstd = _below_autograd(x, shape, weight, eps)
        ctx.shape, ctx.eps = shape, eps
        ctx.save_for_backward(x, weight, rstd)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x, weight, rstd = ctx.saved_tensors
        if torch.is_grad_enabled():  # differentiable (create_graph): the composite's gradient
            return (*_composite_grads(ctx, x, weight, grad), None, None)
        mask = [ctx.needs_input_grad[0], weight is not None and ctx.needs_input_grad[1]]
        assert _FUSED_BACKWARD is not None
        dx, dw = _FUSED_BACKWARD.default(grad, x, ctx.shape, rstd, weight, mask)
        return dx, dw, None, None


def _composite_grads(
    ctx: Any, x: torch.Tensor, weight: torch.Tensor | None, grad: torch.Tensor
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    pairs = zip((x, weight), ctx.needs_input_grad[:2], strict=True)
    inputs: list[torch.Tensor] = [t for t, wanted in pairs if wanted and t is not None]
    with torch.enable_grad():
        out = torch.ops.aten.rms_norm.default(x, ctx.shape, weight, ctx.eps)
    grads = iter(torch.autograd.grad(out, inputs, grad, create_graph=True))
    return tuple(next(grads) if wanted else None for wanted in ctx.needs_input_grad[:2])  # type: ignore[return-value]


def _fused(x: torch.Tensor, weight: Any) -> bool:
    """Whether ATen's ``rms_norm`` would call the fused kernel for these inputs."""
    from torch._prims_common import suggest_memory_format

    if x.is_complex() or suggest_memory_format(x) in _CHANNELS_LAST:
        return False
    return weight is None or (isinstance(weight, torch.Tensor) and weight.dtype == x.dtype)


def fused_rms_norm(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    """``torch.rms_norm(input, normalized_shape, weight=None, eps=None)`` through the fused
    kernel where CUDA would run it, for a traced (meta) input; None to leave the call as is."""
    x = args[0] if args else kwargs.get("input")
    shape = args[1] if len(args) > 1 else kwargs.get("normalized_shape")
    weight = args[2] if len(args) > 2 else kwargs.get("weight")
    eps = args[3] if len(args) > 3 else kwargs.get("eps")
    if _FUSED is None or _FUSED_BACKWARD is None or shape is None:
        return None
    if not isinstance(x, torch.Tensor) or x.device.type != "meta" or not _fused(x, weight):
        return None
    shape = [int(shape)] if isinstance(shape, int) else [int(n) for n in shape]
    wants_grad = torch.is_grad_enabled() and (
        x.requires_grad or (isinstance(weight, torch.Tensor) and weight.requires_grad)
    )
    if not wants_grad:
        return _below_autograd(x, shape, weight, eps)[0]
    out: torch.Tensor = _FusedRmsNorm.apply(x, weight, shape, eps)
    return out
