"""Batch norm as CUDA runs it where ATen picks cuDNN: on a contiguous copy of its input.

``torch.batch_norm`` (``_batch_norm_impl_index``) hands cuDNN its input made contiguous in
the input's suggested memory format, before the op autograd records: the copy, not the
caller's tensor, is what the backward keeps, and the output is contiguous. cuDNN's backward
makes its gradient contiguous the same way. The meta kernel of ``native_batch_norm`` keeps
whatever strides it is given, so a transposed input (a sequence model's ``(N, L, C)`` seen as
``(N, C, L)``) gives a transposed output and no copy, and the linear layer after it takes
another path.

ATen chooses cuDNN for a float32 input, or a float16 one with float32 weights, with weight
and bias, of three dimensions or more, within cuDNN's batch and epsilon limits
(``_select_batch_norm_backend``). An H100 probe (torch 2.11, cuDNN 9.19:
``benchmarks/results/2026-12-07-h100-new-families-convolutions/bn-probe.json.gz``) shows a
copy the size of the input before the output for exactly those in training, kept until the
backward. bfloat16, and float16 with float16 weights, run ATen's own kernel and copy
nothing. PatchTST's training on an H100 (held out, 2026-12-07) has that copy at every batch
norm of its encoder. Only training is emulated: inference showed no difference.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["BATCH_NORM", "cudnn_batch_norm_grad_copy", "cudnn_batch_norm_input", "cudnn_takes"]

BATCH_NORM = torch.batch_norm
_EPSILON_MIN = 1e-5  # CUDNN_BN_MIN_EPSILON
_TRAIN_BATCH_MAX = 880801  # cuDNN's spatial batch norm in training
_INT32_MAX = 2**31 - 1


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], i: int, name: str) -> Any:
    return args[i] if len(args) > i else kwargs.get(name)


def _suggested(x: torch.Tensor) -> torch.memory_format:
    """ATen's ``suggest_memory_format``: channels-last where the strides are, else contiguous."""
    for dims, layout in ((4, torch.channels_last), (5, torch.channels_last_3d)):
        if x.dim() == dims and not x.is_contiguous() and x.is_contiguous(memory_format=layout):
            return layout
    return torch.contiguous_format


def cudnn_takes(x: torch.Tensor, weight: Any, bias: Any) -> bool:
    """Whether ATen hands these to cuDNN, by dtype and shape (the mode and limits apart)."""
    if not isinstance(weight, torch.Tensor) or not isinstance(bias, torch.Tensor):
        return False
    if torch.bfloat16 in (x.dtype, weight.dtype):
        return False
    if x.dtype == torch.float16 and weight.dtype != torch.float32:
        return False
    return x.dtype in (torch.float32, torch.float16) and x.dim() >= 3


def cudnn_batch_norm_input(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """``torch.batch_norm``'s arguments with the input replaced by the contiguous copy that
    cuDNN runs on, where a training call goes to cuDNN and its input is not contiguous in
    its suggested format; else the arguments as given."""
    if "input" in kwargs:
        return args
    x = _arg(args, kwargs, 0, "input")
    weight, bias = _arg(args, kwargs, 1, "weight"), _arg(args, kwargs, 2, "bias")
    mean, var = _arg(args, kwargs, 3, "running_mean"), _arg(args, kwargs, 4, "running_var")
    training, eps = _arg(args, kwargs, 5, "training"), _arg(args, kwargs, 7, "eps")
    enabled = _arg(args, kwargs, 8, "cudnn_enabled")
    if not isinstance(x, torch.Tensor) or not (training and enabled and torch.is_grad_enabled()):
        return args
    if not cudnn_takes(x, weight, bias) or (mean is None) != (var is None):
        return args
    if float(eps) < _EPSILON_MIN or x.shape[0] > _TRAIN_BATCH_MAX or x.numel() >= _INT32_MAX:
        return args
    layout = _suggested(x)
    if x.is_contiguous(memory_format=layout):
        return args
    return (x.contiguous(memory_format=layout), *args[1:])


def cudnn_batch_norm_grad_copy(args: tuple[Any, ...]) -> int:
    """Bytes of the contiguous copy of the gradient that cuDNN's backward makes first, for a
    ``native_batch_norm_backward`` of a cuDNN batch norm (its input already the contiguous
    copy): the gradient's size where it is not contiguous, else 0."""
    grad, x, weight = args[0], args[1], args[2]
    if not isinstance(grad, torch.Tensor) or not isinstance(x, torch.Tensor):
        return 0
    if not cudnn_takes(x, weight, weight) or not x.is_contiguous():
        return 0
    if grad.is_contiguous(memory_format=_suggested(x)):
        return 0
    return grad.numel() * grad.element_size()
