"""torchvision's deformable convolution (``torchvision.ops.deform_conv2d``) as its CUDA kernel
runs it.

The meta kernel gives the op's outputs only. The CUDA kernel (torchvision's
``ops/cuda/deform_conv2d_kernel.cu``, as in 0.26) works on blocks of ``n`` images, ``n`` the
largest divisor of the batch up to 32, and takes through the caching allocator:

forward
    contiguous copies of whatever input is not contiguous; a zeroed output
    ``(B, C_out, H_out, W_out)``; a zeroed blocked copy of it; a zeroed column buffer of
    ``C_in * kh * kw`` rows by ``n * H_out * W_out`` (the sampled input, one matrix product per
    block and weight group). The output returned is ``out + bias``, a new tensor; the three are
    freed when the kernel returns. Its matrix products take the thread's cuBLAS workspace.
backward
    the input, offset and mask gradients (zeroed); then a column buffer as large again, with,
    per block and weight group, a copy of that block's output gradient (``C_out / groups`` by
    ``n * H_out * W_out``: its slice does not flatten as a view when ``n > 1``); then the
    weight gradient, a contiguous copy of the whole output gradient in blocked order and a
    second column buffer; then the bias gradient, a sum of the output gradient times ones.

An H200 trace (torch 2.11, torchvision 0.26: a segmenter with 3x3 deformable convolutions of
256 and 512 channels at 32x32, batch 64, float32 under autocast) shows these sizes in this
order: 67,108,864 (output), 67,108,864 (blocked), 301,989,888 (columns), 67,108,864 (the
returned sum); in the backward 603,979,776 (columns) and 67,108,864 per block (the slice
copy), then 134,217,728 (the blocked gradient) and 603,979,776 again. memfit allocates the
weight and bias gradients with the other outputs, before the column buffers: the peak is the
same, the order of those small blocks differs.
"""

from __future__ import annotations

from typing import Any

import torch

from memfit.trace._fake_kernels import op_name
from memfit.trace._scratch import Scratch

__all__ = [
    "DEFORM_OPS",
    "deform_backward_order",
    "deform_scratch",
    "deform_temporaries",
    "is_deform",
]

FORWARD = "torchvision::deform_conv2d.default"
BACKWARD = "torchvision::_deform_conv2d_backward.default"
DEFORM_OPS = frozenset({FORWARD, BACKWARD})
_MAX_PARALLEL_IMAGES = 32  # kMaxParallelImgs


def is_deform(func: Any) -> bool:
    """Whether ``func`` is torchvision's deformable convolution or its backward."""
    return op_name(func) in DEFORM_OPS


def _block(batch: int) -> int:
    """Images per block: the largest divisor of the batch up to 32."""
    return next(k for k in range(min(batch, _MAX_PARALLEL_IMAGES), 0, -1) if batch % k == 0)


def _bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _copies(tensors: list[Any], label: str) -> list[tuple[int, str]]:
    return [
        (_bytes(t), f"{label} contiguous copy")
        for t in tensors
        if isinstance(t, torch.Tensor) and not t.is_contiguous()
    ]


def _sizes(x: torch.Tensor, weight: torch.Tensor, offset: torch.Tensor) -> tuple[int, int, int]:
    """Bytes of the output, of one column buffer, and of one block's output-gradient slice."""
    batch, c_in = int(x.shape[0]), int(x.shape[1])
    c_out, kh, kw = (int(n) for n in (weight.shape[0], weight.shape[2], weight.shape[3]))
    pixels = int(offset.shape[2]) * int(offset.shape[3])
    n, e = _block(batch), x.element_size()
    return batch * c_out * pixels * e, c_in * kh * kw * n * pixels * e, c_out * n * pixels * e


def deform_temporaries(func: Any, args: tuple[Any, ...]) -> list[tuple[int, str]]:
    """What the kernel allocates before its outputs and frees when it returns: the forward's
    copies, zeroed output, blocked output and column buffer; the backward's copies."""
    name = op_name(func)
    if name == FORWARD:
        x, weight, offset = args[0], args[1], args[2]
        if not isinstance(x, torch.Tensor) or x.numel() == 0:
            return []
        out, columns, _ = _sizes(x, weight, offset)
        return [
            *_copies(list(args[:5]), "deformable convolution input"),
            (out, "deformable convolution zeroed output"),
            (out, "deformable convolution blocked output"),
            (columns, "deformable convolution columns"),
        ]
    if name == BACKWARD:
        return _copies(list(args[:6]), "deformable convolution backward input")
    return []


def deform_scratch(func: Any, args: tuple[Any, ...]) -> list[list[Scratch]]:
    """The backward's buffers after its outputs, as groups that live one after another: the
    input gradient's columns and slice copy, the weight gradient's blocked output gradient and
    columns, the bias gradient's sum and ones."""
    if op_name(func) != BACKWARD:
        return []
    grad, x, weight, offset = args[0], args[1], args[2], args[3]
    if not isinstance(x, torch.Tensor) or x.numel() == 0:
        return []
    out, columns, piece = _sizes(x, weight, offset)
    copied = _block(int(x.shape[0])) > 1 and int(weight.shape[0]) > 1
    groups_n = int(args[12])
    first: list[Scratch] = [(columns, "deformable convolution backward columns")]
    second: list[Scratch] = []
    if copied:
        first.append((piece // groups_n, "deformable convolution backward gradient slice"))
        second.append((out, "deformable convolution backward blocked gradient"))
    second.append((columns, "deformable convolution weight gradient columns"))
    bias = int(weight.shape[0]) * grad.element_size()
    last: list[Scratch] = [
        (bias, "deformable convolution bias gradient sum"),
        (bias, "deformable convolution bias gradient ones"),
    ]
    return [first, second, last]


def deform_backward_order(func: Any, out: Any) -> Any:
    """The backward's outputs in the order the kernel makes them: input, offset and mask
    gradients first (``backward_gradient_inputs``), then the weight's and the bias's."""
    if op_name(func) == BACKWARD and isinstance(out, tuple) and len(out) == 5:
        return (out[0], out[2], out[3], out[1], out[4])
    return out
