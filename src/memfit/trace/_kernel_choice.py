"""Which CUDA kernel an op without arithmetic runs, where PyTorch picks among kernels that
reach very different shares of the bandwidth for the same bytes (the step-time model's concern):

* concatenations (:func:`cat_family`): batched copies for contiguous inputs, a kernel that
  computes every element's offset for strided ones, or a copy per input;
* elementwise ops (:func:`elementwise_family`): TensorIterator's vectorized kernel when every
  operand is laid out alike and densely, in one dtype and aligned; its unrolled kernel when
  an operand must be cast or is misaligned; its general kernel, which computes each operand's
  offset per element, when one is broadcast or strided.

The trace's tensors carry the GPU's shapes, strides and dtypes, so the choice is made as
PyTorch makes it (``aten/src/ATen/native/cuda/Shape.cu``, ``CUDALoops.cuh``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch

from memfit._tensors import is_dense
from memfit.trace._layouts import channels_last

__all__ = ["cat_family", "elementwise_family"]

_VECTOR_BYTES = 16  # the vectorized kernel's widest load: operands must start on it


def elementwise_family(inputs: Sequence[Any], outputs: Sequence[Any]) -> str:
    """An elementwise op's family by the kernel CUDA runs it with: ``""`` (vectorized, the
    plain elementwise kind), ``ew_unrolled`` (an operand cast to the op's dtype, or not
    aligned for wide loads: mixed precision's bfloat16 times float32) or ``ew_strided`` (an
    operand broadcast or laid out unlike the result: a bias added along a dimension, a scale
    held in a 0-d GPU tensor, a transposed input). CPU scalars are passed by value and do not
    count; neither do boolean masks, whose dtype the kernels take as is."""
    outs = [t for t in outputs if isinstance(t, torch.Tensor)]
    if not outs or outs[0].numel() == 0:
        return ""
    out = outs[0]
    operands = [
        t
        for t in (*outs, *inputs)
        if isinstance(t, torch.Tensor) and not (t.dim() == 0 and t.device.type == "cpu")
    ]
    unlike = any(t.shape != out.shape or t.stride() != out.stride() for t in operands)
    if unlike or not is_dense(out):
        return "ew_strided"
    dtypes = {t.dtype for t in operands if t.dtype is not torch.bool}
    if len(dtypes) > 1 or any(
        t.storage_offset() * t.element_size() % _VECTOR_BYTES for t in operands
    ):
        return "ew_unrolled"
    return ""


_CAT_MAX_DIMS = 4  # CUDA's batched concatenation kernels take results of up to 4 dimensions
_INT32 = 2**31 - 1


def cat_family(tensors: Iterable[Any], dim: int, stacked: bool = False) -> str:
    """The family of a concatenation on CUDA, by the kernel ``torch.cat`` picks for it:
    ``cat`` when every input is contiguous (a batched copy that runs near the bandwidth),
    ``cat_strided`` when some input is strided (a batched copy that computes every element's
    offset on both sides: ViT's backward ``stack`` of its attention's q, k and v gradients, laid
    out as the projection wrote them, ran at a quarter of the bandwidth on the H200), and
    ``copy`` when it copies input by input (inputs of several dtypes, more than four dimensions,
    or an index past 32 bits). ``stack`` along an existing dimension is that dimension's
    concatenation; along a new last one, of inputs one dimension longer."""
    given = [t for t in tensors if isinstance(t, torch.Tensor)]
    # torch skips an empty 1-d input (a cache's first keys) but counts it: with one, a single
    # input still takes the batched kernels
    inputs = [t for t in given if not (t.numel() == 0 and t.dim() == 1)]
    if len(given) < 2 or not inputs:
        return "copy"
    dims = inputs[0].dim() + int(stacked and dim in (-1, inputs[0].dim()))
    total = sum(t.numel() for t in inputs)
    if (
        dims > _CAT_MAX_DIMS
        or total > _INT32
        or len({t.dtype for t in inputs}) > 1
        or any(t.numel() and _max_offset(t) > _INT32 for t in inputs)
    ):
        return "copy"
    layouts = {channels_last(t) for t in inputs}
    layout = torch.channels_last if layouts == {True} else torch.contiguous_format
    if all(t.is_contiguous(memory_format=layout) for t in inputs):
        return "cat"
    return "cat_strided" if layout is torch.contiguous_format else "copy"


def _max_offset(t: torch.Tensor) -> int:
    return sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride(), strict=True))
