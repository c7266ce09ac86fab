"""Outputs where a CUDA kernel and its meta kernel disagree: their layout and their order.

The meta convolution always returns NCHW-contiguous tensors, but on a GPU cuDNN runs a 2-d
convolution in channels-last when its input or weight is channels-last
(``cudnn_conv_suggest_memory_format``), and so returns channels-last outputs and gradients;
otherwise contiguous gradients, where the meta backward follows its grad_output's layout.
Sizes are the same either way; what changes is which later ops see a contiguous tensor, and so
which of them copy (layer norm makes a contiguous copy of its input: ConvNeXt's permuted
``(N, H, W, C)`` view is contiguous on the GPU, after the stem's LayerNorm2d turned the
activations channels-last, and the trace must see it the same way). Memory-efficient
attention writes a bias gradient dense (its rows padded to 16) where the meta kernel keeps
the bias's broadcast strides, and keeps its philox seed and offset on the CPU. And CUDA's
dropout allocates its mask before its output, the meta kernel the other way round (H200
traces); CUDA's CTC loss its log_alpha before the loss (LossCTC.cu); cuDNN attention its
seed and offset before its output. im2col
and col2im resize an input-sized output (:data:`RESIZED_FROM_INPUT`).
"""

from __future__ import annotations

from typing import Any

import torch

from memfit.trace._cudnn_batch_norm import cudnn_takes
from memfit.trace._deform_conv import deform_backward_order
from memfit.trace._loss_kernels import log_sigmoid_output, loss_output

__all__ = ["RESIZED_FROM_INPUT", "channels_last", "conv_memory_format", "cuda_layout", "cuda_order"]

aten = torch.ops.aten
_EMPTY = aten.empty_strided.default


def channels_last(t: Any) -> bool:
    """``suggest_memory_format(t) == ChannelsLast`` for a 4-d tensor: its strides are ordered
    as channels-last ones (channels innermost, then width, height, batch), dense or not (a
    slice of channels of a channels-last tensor still suggests channels-last)."""
    return (
        isinstance(t, torch.Tensor)
        and t.dim() == 4
        and t.dtype != torch.float64
        and _strides_like_channels_last(t, (1, 3, 2, 0))
    )


def _strides_like_channels_last(t: torch.Tensor, order: tuple[int, ...]) -> bool:
    """c10's ``is_channels_last_strides_2d`` / ``_3d``: the strides grow along ``order``,
    each at least the extent of the one before; ambiguous cases (a channel stride equal to the
    batch's, a zero channel stride) count as contiguous, as they do in c10."""
    sizes, strides = tuple(int(s) for s in t.shape), t.stride()
    if strides[1] == 0:
        return False
    least = 0
    for d in order:
        if sizes[d] == 0 or strides[d] < least:
            return False
        if d == 0 and least == strides[1]:
            return False
        least = strides[d] * sizes[d]
    return True


def conv_memory_format(x: Any, weight: Any) -> torch.memory_format:
    """The layout a CUDA convolution runs in (``cudnn_conv_suggest_memory_format``):
    channels-last when the input or the weight suggests it, else contiguous (float64 always
    contiguous); a 1-d convolution runs on a contiguous input viewed as 2-d."""
    tensors = (x, weight)
    if any(t.dtype == torch.float64 for t in tensors):
        return torch.contiguous_format
    if x.dim() == 4 and any(channels_last(t) for t in tensors):
        return torch.channels_last
    if x.dim() == 5 and any(_strides_like_channels_last(t, (1, 4, 3, 2, 0)) for t in tensors):
        return torch.channels_last_3d
    return torch.contiguous_format


def _as_channels_last(t: Any) -> Any:
    if not isinstance(t, torch.Tensor) or t.dim() != 4 or t.device.type != "meta":
        return t
    _, c, h, w = t.shape
    stride = (h * w * c, 1, w * c, c)
    with torch._C.DisableTorchFunction():
        return _EMPTY(tuple(t.shape), stride, dtype=t.dtype, device="meta")


def _as_contiguous(t: Any) -> Any:
    if not isinstance(t, torch.Tensor) or t.device.type != "meta" or t.is_contiguous():
        return t
    with torch._C.DisableTorchFunction():
        return torch.empty(tuple(t.shape), dtype=t.dtype, device="meta")


def cuda_layout(func: Any, args: tuple[Any, ...], out: Any) -> Any:
    """``out`` as the CUDA kernel would lay it out (a new meta tensor where it differs)."""
    if func is aten.convolution.default:
        if channels_last(args[0]) or channels_last(args[1]):
            return _as_channels_last(out)
        return out
    if func is aten.convolution_backward.default and isinstance(out, tuple):
        if channels_last(args[1]) or channels_last(args[2]):
            return (_as_channels_last(out[0]), _as_channels_last(out[1]), *out[2:])
        # the meta kernel follows a channels-last grad_output (ViT's patch embedding, read back
        # through a transpose); cuDNN follows the input and the weight: contiguous gradients,
        # which autograd then keeps as the weight's .grad (no copy into the weight's layout)
        return (_as_contiguous(out[0]), _as_contiguous(out[1]), *out[2:])
    if func is aten.native_batch_norm_backward.default and isinstance(out, tuple):
        x, weight = args[1], args[2]
        cudnn = x.is_contiguous() and cudnn_takes(x, weight, weight)
        if cudnn and isinstance(out[0], torch.Tensor):
            # cuDNN's backward makes its input gradient like its (contiguous) input; the meta
            # kernel follows the gradient's strides (_cudnn_batch_norm)
            return (_as_contiguous(out[0]), *out[1:])
        return out
    if func in NORMS_OF_CONTIGUOUS and isinstance(out, tuple):
        # CUDA's layer and RMS norms run on a contiguous input (``expect_contiguous``) and
        # make their output, or input gradient, like it; the meta kernels follow the strides
        # they are given (H100 zoo, torch 2.11: data2vec-audio's transposed layer norm hands
        # its convolution a transposed gradient, which cuDNN then copies)
        return (_as_contiguous(out[0]), *out[1:])
    if func in _EFFICIENT_BACKWARD and isinstance(out, tuple) and isinstance(out[3], torch.Tensor):
        if func is aten._efficient_attention_backward.default and not _arg(args, 15, False):
            # no bias gradient asked for: CUDA leaves it undefined, meta allocates a scalar
            return (*out[:3], None)
        return (*out[:3], _padded_bias_grad(out[3]))
    if func in _EFFICIENT_FORWARD and isinstance(out, tuple):
        # the philox seed and offset are CPU scalars unless a CUDA graph is being captured
        # (attention.cu, torch 2.11: the H100 op sweep allocates no 8-byte blocks for them)
        with torch._C.DisableTorchFunction():
            seeds = [torch.empty((), dtype=torch.int64, device="cpu") for _ in range(2)]
        return (*out[:2], *seeds, *out[4:])
    if func is aten._efficientzerotensor.default and isinstance(out, torch.Tensor):
        # a ZeroTensor: its allocator hands out no memory (ZeroTensorAllocator); a view
        # over an empty storage, which the trace does not count (H100 op sweep: sgn's
        # backward allocates no gradient)
        with torch._C.DisableTorchFunction():
            empty = torch.empty(0, dtype=out.dtype, device="meta")
            return empty.as_strided(tuple(out.shape), (0,) * out.dim())
    if func in RESIZED_FROM_INPUT and isinstance(out, torch.Tensor) and out.device.type == "meta":
        size = _nbytes(args[0])
        if _nbytes(out) < size:  # resize_ to fewer bytes keeps the input-sized storage
            kept = torch.empty(0, dtype=out.dtype, device="meta")
            storage = torch.UntypedStorage(size, device="meta")
            return kept.set_(storage, 0, out.shape, out.stride())
    return log_sigmoid_output(func, loss_output(func, args, out))


# the norms whose CUDA kernels read their input contiguous, by the index of that input
NORMS_OF_CONTIGUOUS: dict[Any, int] = {
    aten.native_layer_norm.default: 0,
    aten.native_layer_norm_backward.default: 1,
}
if hasattr(aten, "_fused_rms_norm"):
    NORMS_OF_CONTIGUOUS[aten._fused_rms_norm.default] = 0
    NORMS_OF_CONTIGUOUS[aten._fused_rms_norm_backward.default] = 1

_EFFICIENT_FORWARD = frozenset(
    {
        aten._scaled_dot_product_efficient_attention.default,
        aten._efficient_attention_forward.default,
    }
)
_EFFICIENT_BACKWARD = frozenset(
    {
        aten._scaled_dot_product_efficient_attention_backward.default,
        aten._efficient_attention_backward.default,
    }
)


def _arg(args: tuple[Any, ...], i: int, default: Any) -> Any:
    return args[i] if len(args) > i else default


def _padded_bias_grad(grad_bias: torch.Tensor) -> torch.Tensor:
    """The memory-efficient backward's bias gradient: dense at the full (batch, heads, q, k)
    size even for a bias broadcast over the batch (meta keeps the bias's zero strides), its
    last dimension allocated rounded up to 16 and sliced back (attention_backward.cu); autograd
    then sums it to the bias's shape. H200, torch 2.11: 268,435,456 bytes for T5-small's b32
    s512; H100 op sweep: 3,072 bytes for a (4, 4, 3, 6) float32 gradient."""
    *lead, keys = (int(n) for n in grad_bias.shape)
    with torch._C.DisableTorchFunction():
        padded = torch.empty((*lead, -(-keys // 16) * 16), dtype=grad_bias.dtype, device="meta")
        return padded[..., :keys]


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


# CUDA's im2col and col2im allocate their output as ``empty_like(input)`` and then resize it
# (Im2Col.cu, Col2Im.cu): a larger output is a new allocation after the input-sized one, which
# it frees (``KernelModel.copies_first``); a smaller one keeps the input-sized storage (H100
# traces, torch 2.11: ``F.unfold`` of a 2 x 3 x 5 x 5 float32 input, 600 bytes, then 1,536 for
# 2 x 2 windows at stride 1; 600 alone for stride 2)
RESIZED_FROM_INPUT = frozenset({aten.im2col.default, aten.col2im.default})


_REVERSED = frozenset(
    {
        aten.native_dropout.default,
        aten._ctc_loss.default,
        aten._ctc_loss.Tensor,
        aten.nll_loss2d_forward.default,
        aten.multilabel_margin_loss_forward.default,
    }
)


def cuda_order(func: Any, out: Any) -> Any:
    """``out`` in the order the CUDA kernel allocates its outputs: dropout's mask before its
    output, CTC loss's log_alpha before the per-sample loss (multilabel margin loss's is_target
    before its output, likewise), 2-d NLL loss's total weight before the loss
    (``nll_loss2d_forward_cuda`` sizes ``total_weight`` first), embedding bag's bag sizes and
    bag of each index before its output (``_embedding_bag_cuda``), cuDNN attention's philox
    seed and offset before its output and log-sum-exp (attention.cu; H100 traces, torch 2.11)."""
    if func in _REVERSED and isinstance(out, tuple):
        return out[::-1]
    if func in _BAGS and isinstance(out, tuple) and len(out) == 4:
        return (out[2], out[1], out[0], out[3])
    if func is aten._scaled_dot_product_cudnn_attention.default and isinstance(out, tuple):
        return (*out[6:8], *out[:6], *out[8:])
    return deform_backward_order(func, out)


_BAGS = frozenset({aten._embedding_bag.default, aten._embedding_bag_forward_only.default})
