"""The copies CUDA's convolutions make of an input or a gradient not laid out as they run: the
input before the forward's output, the input and grad_output before the backward's outputs.
Each is a temporary of the call (``KernelModel.copies_first``)."""

from __future__ import annotations

from typing import Any

import torch

from memfit.trace._layouts import channels_last, conv_memory_format

__all__ = ["conv_backward_input_copy", "conv_grad_copy", "conv_input_copy", "conv_weight_copy"]


def conv_input_copy(args: tuple[Any, ...]) -> int:
    """Bytes of the copy a CUDA convolution makes of an input not laid out as it runs
    (``at::_convolution``: ``input.contiguous()`` for a 1-d one, viewed as 2-d;
    ``input.contiguous(cudnn_conv_suggest_memory_format)`` for cuDNN, contiguous for the
    depthwise kernel, which runs only where that format is), made before the output and
    freed when the call ends. H100 traces, torch 2.11, timm's efficientvit_m0 b1024 bf16: a
    6,422,528-byte copy of each channel chunk of a channels-last [4096, 64, 7, 7] that its
    cascaded attention convolves; 0 when none is made."""
    x, weight = args[0], args[1]
    if not isinstance(x, torch.Tensor) or not isinstance(weight, torch.Tensor):
        return 0
    fmt = torch.contiguous_format if x.dim() == 3 else conv_memory_format(x, weight)
    if x.is_contiguous(memory_format=fmt):
        return 0
    return int(x.numel() * x.element_size())


def conv_weight_copy(args: tuple[Any, ...]) -> int:
    """Bytes of the copy a CUDA convolution makes of a weight laid out neither contiguously
    nor as it runs, made before the input's copy and freed when the call ends. A weight is
    such a view where autograd convolves by a gradient: the double backward's weight gradient
    convolves the transposed input gradient by the transposed grad_output (H100 traces, torch
    2.11, a WGAN-GP critic at batch 128 in fp32: a 134,217,728-byte copy of a
    [128, 64, 64, 64] grad_output before a 6,291,456-byte input copy, and a 268,435,456-byte
    one a block later). A contiguous weight convolving a channels-last input is not copied
    (H200 traces, ConvNeXt-T's downsampling after its channels-last layer norm); 0 when none
    is made."""
    x, weight = args[0], args[1]
    if not isinstance(x, torch.Tensor) or not isinstance(weight, torch.Tensor) or x.dim() < 4:
        return 0
    if weight.is_contiguous() or weight.is_contiguous(memory_format=conv_memory_format(x, weight)):
        return 0
    return int(weight.numel() * weight.element_size())


def conv_backward_input_copy(args: tuple[Any, ...]) -> int:
    """Bytes of the copy ``at::convolution_backward`` makes of a 1-d convolution's input when
    the weight gradient is wanted and the input is not contiguous
    (``input.contiguous(backend_memory_format)``, an argument of the cuDNN call: made before
    the grad_output copy and the outputs, freed after the weight gradient, after the
    grad_output copy). H100 zoo, torch 2.11: data2vec-audio's feature extractor convolves its
    layer norm's transposed output (a 3,268,608-byte copy at batch 8); 0 when none is made."""
    x, weight, mask = args[1], args[2], args[10]
    if not isinstance(x, torch.Tensor) or not isinstance(weight, torch.Tensor) or x.dim() != 3:
        return 0
    if not mask[1] or x.is_contiguous():
        return 0
    return int(x.numel() * x.element_size())


def conv_grad_copy(args: tuple[Any, ...]) -> int:
    """Bytes of the copy cuDNN's convolution backward makes of grad_output when it is not laid
    out in the memory format the convolution runs in (channels-last if the input or the weight
    is, else contiguous): ``grad_output.contiguous(memory_format)`` in cudnn's backward. ViT's
    patch embedding gets its gradient back through a transpose (H200, ViT-B/16 b128 bf16: a
    38,535,168-byte copy); 0 when none is made."""
    grad, x, weight = args[0], args[1], args[2]
    if not all(isinstance(t, torch.Tensor) and t.dim() in (3, 4) for t in (grad, x, weight)):
        return 0
    if bool(args[7]) or any(int(d) != 1 for d in args[6]):  # transposed, dilated: not measured
        return 0
    fmt = (
        torch.channels_last
        if x.dim() == 4 and (channels_last(x) or channels_last(weight))
        else torch.contiguous_format
    )
    if grad.is_contiguous(memory_format=fmt):
        return 0
    return int(grad.numel() * grad.element_size())
