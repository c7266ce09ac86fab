"""Scratch memory of CUDA reductions (``sum``, ``mean``, ``amax``...).

When a reduction has few outputs and many inputs per output, PyTorch's reduce kernel splits
each output across thread blocks and combines partial results through a global buffer plus a
semaphore array, both taken from the caching allocator for the kernel's duration. The sizes
follow ``setReduceConfig`` and ``ReduceConfig::global_memory_size`` in
``ATen/native/cuda/Reduce.cuh`` (torch 2.11); e.g. the bias gradient of a Linear layer
(``grad.sum(0)`` over 6304 x 768 fp32 on an H200) takes 38,928,384 + 24 bytes, as measured.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["reduction_scratch"]

_MAX_NUM_THREADS = 512
_MIN_VALUES_PER_THREAD = 16
_MAX_VALUES_PER_THREAD = 256
_INPUT_VEC_SIZE = 4


def _div_up(a: int, b: int) -> int:
    return (a + b - 1) // b


def _last_pow2(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


def _coalesce(shape: Sequence[int], reduced: set[int]) -> list[tuple[int, bool]]:
    """(size, reduced) per dimension, innermost first, merging neighbours of one kind."""
    dims: list[tuple[int, bool]] = []
    for i in reversed(range(len(shape))):
        size, is_reduced = int(shape[i]), i in reduced
        if size == 1:
            continue
        if dims and dims[-1][1] == is_reduced:
            dims[-1] = (dims[-1][0] * size, is_reduced)
        else:
            dims.append((size, is_reduced))
    return dims


def reduction_scratch(
    x: torch.Tensor, dims: Sequence[int] | None, sm_count: int, threads_per_sm: int
) -> tuple[int, int] | None:
    """(buffer bytes, semaphore bytes) a CUDA reduction of ``x`` over ``dims`` allocates, or
    None when it reduces within each block. A permuted ``x`` whose elements are dense (a
    channels-last gradient) is reduced in its memory order, as TensorIterator reorders it: a
    convolution's bias gradient, ``grad.sum((0, 2, 3))`` of a channels-last ``grad``, takes
    4x its bf16 bytes (H200: ConvNeXt-T's and ViT-B/16's, measured)."""
    if x.numel() == 0:
        return None
    ndim = x.dim()
    reduced = set(range(ndim)) if not dims else {d % ndim for d in dims}
    if not x.is_contiguous():
        strides = x.stride()
        order = sorted(range(ndim), key=lambda d: -strides[d])  # outermost first
        x = x.permute(order)
        if not x.is_contiguous():
            return None  # overlapping or with gaps: not modelled
        reduced = {order.index(d) for d in reduced}
    layout = _coalesce(x.shape, reduced)
    if not layout:
        return None
    num_outputs = 1
    for size, is_reduced in layout:
        if not is_reduced:
            num_outputs *= size
    inputs_per_output = x.numel() // num_outputs
    arg_size = 8 if x.dtype == torch.float64 else 4
    num_reduce_dims = sum(1 for _, r in layout if r)
    on_fastest = layout[0][1] or num_reduce_dims == len(layout)
    output_vec = 1
    if on_fastest:
        dim0, dim1 = inputs_per_output, num_outputs
        if dim0 >= 128 and num_reduce_dims == 1:
            dim0 //= _INPUT_VEC_SIZE
    else:
        dim0, dim1 = num_outputs, inputs_per_output
        # get_output_vec_size: the output extent and the input's other strides, in elements
        checks = [layout[0][0]]
        stride = 1
        for size, _ in layout[:-1]:
            stride *= size
            checks.append(stride)
        output_vec = 4
        for n in checks:
            while n % output_vec:
                output_vec //= 2
        dim0 //= output_vec
    max_threads = _MAX_NUM_THREADS // output_vec
    dim0_pow2 = _last_pow2(dim0) if dim0 < max_threads else max_threads
    dim1_pow2 = _last_pow2(dim1) if dim1 < max_threads else max_threads
    block_width = min(dim0_pow2, 32)
    block_height = min(dim1_pow2, max_threads // block_width)
    block_width = min(dim0_pow2, max_threads // block_height)
    num_threads = block_width * block_height

    step_input, step_output = 1, 1
    block_x_reduce = on_fastest
    if on_fastest:
        step_input *= block_width
    else:
        step_output *= block_width
    values_per_thread = _div_up(inputs_per_output, step_input)
    warp_split = values_per_thread >= min(block_height * 16, _MAX_VALUES_PER_THREAD)
    if warp_split:
        step_input *= block_height
    else:
        step_output *= block_height
    values_per_thread = _div_up(inputs_per_output, step_input)
    grid_x = _div_up(num_outputs // output_vec, step_output)
    target_grid = sm_count * (threads_per_sm // num_threads)
    if not (warp_split and values_per_thread >= _MAX_VALUES_PER_THREAD and grid_x <= target_grid):
        return None
    ctas = min(
        max(_div_up(target_grid, grid_x), _div_up(values_per_thread, _MAX_VALUES_PER_THREAD)),
        _div_up(values_per_thread, _MIN_VALUES_PER_THREAD),
    )
    if ctas <= 1:
        return None
    size = arg_size * num_outputs * ctas
    if not block_x_reduce:
        size *= block_width * output_vec
    return size, 4 * grid_x
