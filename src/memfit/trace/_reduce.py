"""Scratch memory of CUDA reductions (``sum``, ``mean``, ``amax``...).

When a reduction has few outputs and many inputs per output, PyTorch's reduce kernel splits
each output across thread blocks and combines partial results through a global buffer plus a
semaphore array, both taken from the caching allocator for the kernel's duration. The sizes
follow ``setReduceConfig`` and ``ReduceConfig::global_memory_size`` in
``ATen/native/cuda/Reduce.cuh`` (torch 2.11); e.g. the bias gradient of a Linear layer
(``grad.sum(0)`` over 6304 x 768 fp32 on an H200) takes 38,928,384 + 24 bytes, as measured.

The buffer holds one accumulator per output and block, so its size follows the kernel's
accumulator type (``arg_t``), which differs between reductions (:func:`reduce_op_scratch`):
``sum``, ``mean``, ``prod`` and the norms accumulate in float for half inputs; ``max``, ``min``,
``amax`` and ``amin`` in the input's own type; ``aminmax`` in a pair of it; ``all`` and ``any``
in a bool; ``var``, ``std`` and
their ``_mean`` forms in a Welford record (mean, m2, count, float count: 16 bytes, 32 in
double). H100 traces, torch 2.11, full reductions of 4,096,000 bf16 elements (500 blocks):
``prod`` 2,000 bytes, ``max`` 1,000, ``aminmax`` 2,000, ``std`` 8,000; of 512,000 float32
elements (63 blocks): 252, 252, 504 and 1,008.

An input that spans 2 GiB or more (past 32-bit indexing) is reduced in pieces: where the
output's type is not the accumulator's (a half sum; a value and its index, ``max(dim)``), they
accumulate into a buffer of one accumulator per output first (H100, torch 2.11: 6,553,600
bytes for 1,638,400 bf16 sums of a 4,194,304,000 byte input; 2,466,250,752 for the 154,140,672
pairs of Hiera's ``max(dim=3)`` over a bf16 view spanning its 3.7 GB ``qkv``).

A ``sum``, ``mean`` or ``prod`` whose accumulating type differs from its input's (a boolean
mask counted into int64, a ``dtype=`` argument) first copies the input into that type
(``make_reduction``, ReduceOps.cpp), after its output and before the kernel; only half inputs
summed into float32 are read as they are (H100, torch 2.11: ``count_nonzero`` of 15 elements
allocates its 8-byte output, then a 120-byte int64 copy of the mask).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from memfit.trace._scratch import Scratch

__all__ = ["REDUCE_OPS", "reduce_op_scratch", "reduction_scratch", "renorm_scratch"]

aten = torch.ops.aten

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
    x: torch.Tensor,
    dims: Sequence[int] | None,
    sm_count: int,
    threads_per_sm: int,
    arg_size: int | None = None,
) -> tuple[int, int] | None:
    """(buffer bytes, semaphore bytes) a CUDA reduction of ``x`` over ``dims`` allocates, or
    None when it reduces within each block. A permuted ``x`` whose elements are dense (a
    channels-last gradient) is reduced in its memory order, as TensorIterator reorders it: a
    convolution's bias gradient, ``grad.sum((0, 2, 3))`` of a channels-last ``grad``, takes
    4x its bf16 bytes (H200: ConvNeXt-T's and ViT-B/16's, measured). ``arg_size`` is the
    bytes of the kernel's accumulator (default: a float, a double for float64 inputs)."""
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
    if arg_size is None:
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


_DIM_AT: dict[Any, int] = {  # the position of the ``dim`` argument; absent: a full reduction
    aten.sum.dim_IntList: 1,
    aten.mean.dim: 1,
    aten.nansum.default: 1,
    aten.prod.dim_int: 1,
    aten.amax.default: 1,
    aten.amin.default: 1,
    aten.linalg_vector_norm.default: 2,
    aten.norm.ScalarOpt_dim: 2,
    aten.var.correction: 1,
    aten.std.correction: 1,
    aten.var_mean.correction: 1,
    aten.std_mean.correction: 1,
    aten.aminmax.default: 99,  # keyword only
    aten.all.dim: 1,
    aten.all.dims: 1,
    aten.any.dim: 1,
    aten.any.dims: 1,
    aten.max.dim: 1,
    aten.min.dim: 1,
    aten.argmax.default: 1,
    aten.argmin.default: 1,
}
_FULL = (
    aten.sum.default,
    aten.mean.default,
    aten.prod.default,
    aten.max.default,
    aten.all.default,
    aten.any.default,
)
_CASTS = frozenset(  # copy an input of another type than they accumulate in (make_reduction)
    {
        aten.sum.default,
        aten.sum.dim_IntList,
        aten.mean.default,
        aten.mean.dim,
        aten.nansum.default,
        aten.prod.default,
        aten.prod.dim_int,
    }
)
_OWN_TYPE = frozenset({aten.amax.default, aten.amin.default, aten.max.default, aten.min.default})
_LOGICAL = frozenset(
    {aten.all.default, aten.all.dim, aten.all.dims, aten.any.default, aten.any.dim, aten.any.dims}
)
# reduce to a value and its index: a pair of the value (in float for half argmax/argmin) and an
# int64, 16 bytes (``MaxOps``, ``ArgMaxOps``)
_PAIRED = frozenset({aten.max.dim, aten.min.dim, aten.argmax.default, aten.argmin.default})
_WELFORD = frozenset(
    {aten.var.correction, aten.std.correction, aten.var_mean.correction, aten.std_mean.correction}
)
REDUCE_OPS = frozenset({*_DIM_AT, *_FULL, aten.min.default, aten.norm.Scalar})
_HALF = (torch.float16, torch.bfloat16)


def _dims(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[int] | None:
    if func in _FULL:
        return None
    at = _DIM_AT.get(func)
    dims = args[at] if at is not None and len(args) > at else kwargs.get("dim")
    if dims is None:
        return None
    return [int(dims)] if isinstance(dims, int) else [int(d) for d in dims]


def _accumulated(func: Any, x: torch.Tensor, kwargs: dict[str, Any]) -> torch.dtype:
    """The type a ``_CASTS`` reduction accumulates in: ``dtype=``, else int64 for integers
    and booleans (``sum``, ``prod``), else the input's."""
    dtype = kwargs.get("dtype")
    if isinstance(dtype, torch.dtype):
        return dtype
    if not x.is_floating_point() and not x.is_complex():
        return torch.int64
    return x.dtype


_INT32_MAX = 2**31 - 1


def _past_32_bit_indexing(x: torch.Tensor) -> bool:
    """Whether TensorIterator cannot index ``x`` in 32 bits: more elements than an int32
    holds, or a furthest element past 2 GiB from its start (a strided view into a larger
    tensor: Hiera's query, a third of its ``qkv`` output, reduced by ``max(dim)``)."""
    furthest = sum((int(n) - 1) * int(st) for n, st in zip(x.shape, x.stride(), strict=True))
    return x.numel() > _INT32_MAX or (furthest + 1) * x.element_size() > _INT32_MAX


def _outputs(x: torch.Tensor, dims: list[int] | None) -> int:
    """How many outputs a reduction of ``x`` over ``dims`` (all if None) has."""
    if dims is None:
        return 1
    reduced = {d % max(x.dim(), 1) for d in dims}
    n = 1
    for i, extent in enumerate(x.shape):
        n *= 1 if i in reduced else int(extent)
    return n


def reduce_op_scratch(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], sm_count: int, threads_per_sm: int
) -> list[tuple[int, str]]:
    """What a reduction op of :data:`REDUCE_OPS` allocates beyond its outputs, in order: the
    copy of its input in the type it accumulates in (if any), then the partial results and
    semaphores of a reduction split across blocks (see the module doc)."""
    x = args[0] if args else None
    if not isinstance(x, torch.Tensor) or x.numel() == 0:
        return []
    out: list[tuple[int, str]] = []
    size = x.element_size()
    arg_size = 8 if x.dtype == torch.float64 else 4
    if func in _CASTS:
        acc = _accumulated(func, x, kwargs)
        if acc != x.dtype and not (x.dtype in _HALF and acc == torch.float32):
            out.append((x.numel() * acc.itemsize, "reduction input cast"))
        # an int64 or float64 accumulator, cast into or not (an int64 input's sum: H100,
        # torch 2.11, a mixture of experts' int64 expert mask summed over its tokens took
        # partial results of 8 bytes each)
        arg_size = max(arg_size, acc.itemsize)
    elif func in _OWN_TYPE:
        arg_size = size
    elif func is aten.aminmax.default:
        arg_size = 2 * size
    elif func in _LOGICAL:
        arg_size = 1  # a bool
    elif func in _WELFORD:
        arg_size = 4 * arg_size
    elif func in _PAIRED:
        arg_size = 16
    dims = _dims(func, args, kwargs)
    given = kwargs.get("dtype")
    out_size = given.itemsize if isinstance(given, torch.dtype) else size
    if _past_32_bit_indexing(x) and arg_size != out_size and func not in _LOGICAL:
        # too large for 32-bit indexing: run as sub-iterators that accumulate into a buffer
        # of arg_t per output, when the output's type cannot hold the running sums (a bf16
        # input summed into a float32 output accumulates in the output: H200, torch 2.11)
        out.append((_outputs(x, dims) * arg_size, "reduction accumulation buffer"))
    scratch = reduction_scratch(x, dims, sm_count, threads_per_sm, arg_size)
    if scratch is not None:
        out += [(scratch[0], "reduction partial results"), (scratch[1], "reduction semaphores")]
    return out


def renorm_scratch(
    args: tuple[Any, ...], sm_count: int, threads_per_sm: int
) -> list[list[Scratch]]:
    """``renorm``'s temporaries after its output (``renorm_out``, Normalization.cpp): the norm
    of each slice along ``dim`` in the accumulating type (a ``linalg_vector_norm`` over the
    other dims, held to the end, with its own split-reduction scratch), then, for half inputs,
    the scale factors in the input's type. H100 traces, torch 2.11, (160, 160, 160) bf16 over
    dim -1: 640, 32,768,000 and 8 (the reduction's), 320."""
    x, dim = args[0], args[2]
    if not isinstance(x, torch.Tensor) or x.dim() == 0 or x.numel() == 0:
        return []
    dim = int(dim) % x.dim()
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    slices = int(x.shape[dim])
    out: list[Scratch] = [(slices * acc.itemsize, "renorm slice norms", True)]
    others = [d for d in range(x.dim()) if d != dim]
    scratch = reduction_scratch(x, others, sm_count, threads_per_sm, acc.itemsize)
    if scratch is not None:
        out += [(scratch[0], "reduction partial results"), (scratch[1], "reduction semaphores")]
    if acc != x.dtype:
        return [out, [(slices * x.element_size(), "renorm scale factors")]]
    return [out]
