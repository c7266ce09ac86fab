"""Ops whose CUDA kernel is written as other ATen ops: the trace runs those ops instead.

A meta kernel gives such an op's outputs alone, while on the GPU each op inside it allocates
its own outputs through the caching allocator. Run under the trace's dispatch mode, the ops
inside are recorded one by one, with their own rules (a sort's scratch, a reduction's).

``median()`` and ``nanmedian()`` over all elements (``median_impl`` in ATen's
cuda/Sorting.cpp) sort the flattened input (values, int64 indices and the sort's own
scratch: 8 bytes an element and more), then pick the middle value: ``median`` with a
``where`` on whether the largest is NaN, ``nanmedian`` by a tensor index computed from the
NaN count (``isnan``, ``sum``, a float quotient, its int64 copy; H100 op sweep, torch 2.11).

``masked_scatter`` clones its input, broadcast with the mask, and scatters into the clone in
place (``masked_scatter_``, whose kernel has its own scratch); its backward
(``masked_scatter_backward``) selects the gradient at the mask (``masked_select``: ``nonzero``
and an index) and pads it with zeros (``cat``) to the input's size.

Others have no CUDA kernel of their own: CUDA runs their composite kernel, which the trace
calls by its dispatch key (:data:`_BY_KEY`). H100 traces, torch 2.11: ``isinf`` takes ``abs`` of
its input first, ``dist`` the difference of its inputs, ``mvlgamma`` an (n, p) ``lgamma``
table, ``logsumexp`` (through its ``out=`` form) the maxima, their infinity mask and the
shifted input, ``ldexp`` ``mul(self, pow(2, other))``, an input-sized power beside the output,
``_safe_softmax`` (SDPA's math backend) the softmax, a boolean of the input's size (its
``-inf``), one a row (``all``) and a scalar zero.

``_trilinear`` (``F.bilinear``) runs its non-functional composite, a ``bmm`` pair for each
output feature into zeros (H100 op sweep, torch 2.11: a [8, 8] output made of 8 such pairs).

``normal`` with tensor arguments (Distributions' ``normal_impl``): a tensor ``std`` is checked
twice, before and after the output is allocated (``std.min().ge(0).item()``, two scalars at
a time, which meta tensors skip); a tensor ``mean`` with a float ``std`` makes an output-sized
tensor it never uses; a float ``mean`` becomes a scalar tensor.

``cholesky`` (deprecated) is ``linalg_cholesky_ex`` and its error check.

``searchsorted`` with a ``sorter`` bounds it first (``aminmax``), then searches as without.
``multilabel_margin_loss`` of rows, reduced, sums the per-row losses into its output;
``soft_margin_loss``'s backward makes ``exp(-target * x)`` and updates its gradient in place.

``_unsafe_masked_index`` (which compiled code calls) clamps its indices, indexes, and fills
where the mask is false (``logical_not``, ``masked_fill``); its backward
``_unsafe_masked_index_put_accumulate`` clamps the indices again, zeroes the values where the
mask is false and puts them with ``index_put`` accumulating (a clone, then the sort-based
kernel: ``_index_put``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch
from torch._C import DispatchKey

__all__ = ["cuda_composite"]

aten = torch.ops.aten


def _median(x: torch.Tensor, ignore_nan: bool) -> Any:
    size = x.numel()
    if size == 0:
        return aten.full.default([], float("nan"), dtype=x.dtype, device=x.device)
    flat = aten.reshape.default(x, [-1])
    values = aten.sort.default(flat)[0]
    if not ignore_nan:
        last = aten.select.int(values, 0, -1)
        middle = aten.select.int(values, 0, (size - 1) // 2)
        return aten.where.self(aten.isnan.default(last), last, middle)
    # k = (((size - 1) - isnan(sorted).sum()) / 2).toType(kLong); sorted[k]: the statement's
    # temporaries (a true quotient in float) go at its end, last first, before the index
    isnan = aten.isnan.default(values)
    count = aten.sum.default(isnan)
    rest = aten.rsub.Scalar(count, size - 1)
    half = aten.div.Scalar(rest, 2)
    k = aten._to_copy.default(half, dtype=torch.int64)
    del half, rest, count, isnan
    out = aten.index.Tensor(values, [k])
    del k
    return out


def _median_all(x: torch.Tensor) -> Any:
    return _median(x, ignore_nan=False)


def _nanmedian_all(x: torch.Tensor) -> Any:
    return _median(x, ignore_nan=True)


def _masked_scatter(x: torch.Tensor, mask: torch.Tensor, source: torch.Tensor) -> Any:
    shape = list(torch.broadcast_shapes(mask.shape, x.shape))
    mask, x = aten.expand.default(mask, shape), aten.expand.default(x, shape)
    out = aten.clone.default(x, memory_format=torch.contiguous_format)
    return aten.masked_scatter_.default(out, mask, source)


def _masked_scatter_backward(grad: torch.Tensor, mask: torch.Tensor, sizes: list[int]) -> Any:
    selected = aten.masked_select.default(grad, mask)
    missing = math.prod(sizes) - selected.numel()
    if missing > 0:
        zeros = aten.zeros.default([missing], dtype=grad.dtype, device=grad.device)
        joined = aten.cat.default([selected, zeros])
        del zeros  # the C++ initializer list's copies go last first: the zeros, then the rest
        selected = joined
    return aten.view.default(selected, list(sizes))


def _clamped(x: torch.Tensor, indices: list[Any]) -> list[Any]:
    return [
        None if i is None else aten.clamp.default(i, -int(size), int(size) - 1)
        for i, size in zip(indices, x.shape, strict=False)
    ]


def _release(tensors: list[Any]) -> None:
    """Let go of a list's tensors first to last, as a C++ vector's destructor does (a Python
    list lets go of its items last first)."""
    for i in range(len(tensors)):
        tensors[i] = None


def _unsafe_masked_index(x: torch.Tensor, mask: torch.Tensor, indices: list[Any], fill: Any) -> Any:
    if x.numel() == 0:  # the meta kernel's empty-input path
        return NotImplemented
    clamped = _clamped(x, indices)
    result = aten.index.Tensor(x, clamped)  # _unsafe_index on CUDA
    out = aten.masked_fill.Scalar(result, aten.logical_not.default(mask), fill)
    del result  # as C++ destroys them: the later first, the vector's first to last
    _release(clamped)
    return out


def _unsafe_masked_index_put_accumulate(
    x: torch.Tensor, mask: torch.Tensor, indices: list[Any], values: torch.Tensor
) -> Any:
    if x.numel() == 0:
        return aten.clone.default(x)
    clamped = _clamped(x, indices)
    masked = aten.masked_fill.Scalar(values, aten.logical_not.default(mask), 0)
    out = aten.index_put.default(x, clamped, masked, True)  # _unsafe_index_put on CUDA
    del masked  # as C++ destroys them: the later first, the vector's first to last
    _release(clamped)
    return out


def _count_nonzero(x: torch.Tensor, dim: Any) -> torch.Tensor:
    """``count_nonzero_cuda``: ``(self != 0).sum(dims)``, the mask, then the sum (its int64
    copy of the mask: H100 traces, torch 2.11, 15 elements: 15, the 8-byte output, 120)."""
    return (x != 0).sum(dim)


def _check_std(std: torch.Tensor) -> None:
    """``CHECK_NORMAL_TENSOR_STD``: ``std.min().ge(0).item<bool>()``, skipped on meta tensors,
    whose two temporaries go at the end of the statement, the later first."""
    if std.numel() == 0:
        return
    low = aten.min.default(std)
    nonnegative = aten.ge.Scalar(low, 0)
    del nonnegative, low


def _normal_tensor_float(mean: torch.Tensor, std: float = 1.0, **kwargs: Any) -> Any:
    # normal_out_impl(output, Tensor mean, double std): an output-sized std_tensor it never uses
    out = aten.empty_like.default(mean, memory_format=torch.contiguous_format)
    unused = aten.empty_like.default(out, memory_format=torch.contiguous_format)
    aten.normal_.default(out, 0.0, std)
    aten.add_.Tensor(out, mean)
    del unused
    return out


def _normal_float_tensor(mean: float, std: torch.Tensor, **kwargs: Any) -> Any:
    _check_std(std)
    out = aten.empty_like.default(std, memory_format=torch.contiguous_format)
    _check_std(std)  # again in normal_out_impl
    mean_tensor = aten.full.default([], mean, dtype=out.dtype, device=out.device)
    aten.normal_.default(out, 0.0, 1.0)
    aten.add_.Tensor(aten.mul_.Tensor(out, std), mean_tensor)
    del mean_tensor
    return out


def _normal_tensor_tensor(mean: torch.Tensor, std: torch.Tensor, **kwargs: Any) -> Any:
    _check_std(std)
    shape = list(torch.broadcast_shapes(mean.shape, std.shape))
    out = aten.empty.memory_format(shape, dtype=mean.dtype, device=mean.device)
    _check_std(std)  # again in normal_out_impl
    aten.normal_.default(out, 0.0, 1.0)
    aten.add_.Tensor(aten.mul_.Tensor(out, std), mean)
    return out


def _equal(x: torch.Tensor, other: torch.Tensor) -> Any:
    """``cuda_equal``: ``eq(self, other).all().item()`` where shapes agree and the two are not
    the same view (a boolean of the inputs' size, the reduction's own scratch)."""
    if x.shape != other.shape:
        return False
    if x.numel() == 0:
        return True
    aliased = torch._C._is_alias_of(x, other)  # type: ignore[attr-defined]
    same_view = aliased and (x.storage_offset(), x.stride()) == (
        other.storage_offset(),
        other.stride(),
    )
    if same_view and x.dtype == other.dtype:
        return True
    equal = aten.eq.Tensor(x, other)
    every = aten.all.default(equal)
    answer = bool(aten._local_scalar_dense.default(every))
    del every, equal
    return answer


def _searchsorted(sorted_sequence: torch.Tensor, values: Any, **kwargs: Any) -> Any:
    """``searchsorted`` with a ``sorter`` first checks it lies within the sequence
    (``searchsorted_pre_check``: ``sorter.aminmax()``, two int64 scalars and the reduction's
    scratch, all freed before the output is made; H100 op sweep, torch 2.11: 8, 8, 1,008 and 4
    bytes for 512,000 indices); then the kernel itself, as without one (NotImplemented)."""
    sorter = kwargs.get("sorter")
    if isinstance(sorter, torch.Tensor) and sorter.numel() > 0:
        bounds = aten.aminmax.default(sorter)
        del bounds
    return NotImplemented


def _multilabel_margin_loss(x: torch.Tensor, target: torch.Tensor, reduction: int) -> Any:
    """``multilabel_margin_loss_forward`` of a batch of rows, reduced
    (MultiLabelMarginCriterion.cu): ``is_target``, the per-row losses, then the scalar output
    summed from them (divided in place for a mean), the per-row losses freed last (H100 op
    sweep, torch 2.11: 819,200, 2,560, 4 bytes, then the 2,560 freed, for 640 float32 rows)."""
    if reduction == 0 or x.dim() != 2:
        return NotImplemented
    rows, is_target = aten.multilabel_margin_loss_forward.default(x, target, 0)
    out = aten.sum.default(rows)
    if reduction == 1:
        aten.div_.Scalar(out, int(x.shape[0]))
    del rows
    return out, is_target


def _soft_margin_loss_backward(
    grad: torch.Tensor, x: torch.Tensor, target: torch.Tensor, reduction: int
) -> Any:
    """``soft_margin_loss_backward_out`` (Loss.cpp): ``z = exp(-target * x)``, its two
    temporaries freed at the statement's end; the gradient made by ``mul_out(target, z)``
    (resized from empty), then updated in place; ``z`` freed on return (H100 op sweep, torch
    2.11: 3 input-sized temporaries where the meta kernel made none)."""
    negated = aten.neg.default(target)
    product = aten.mul.Tensor(negated, x)
    z = aten.exp.default(product)
    del product, negated
    grad_input = aten.mul.Tensor(target, z)
    aten.mul_.Scalar(grad_input, -(1.0 / max(x.numel(), 1) if reduction == 1 else 1.0))
    aten.add_.Scalar(z, 1)
    aten.mul_.Tensor(aten.div_.Tensor(grad_input, z), grad)
    del z
    return grad_input


def _cholesky(x: torch.Tensor, upper: bool = False) -> Any:
    """The deprecated ``cholesky``: ``linalg_cholesky_ex`` and its error check."""
    factor, info = aten.linalg_cholesky_ex.default(x, upper=upper, check_errors=False)
    aten._linalg_check_errors.default(info, "cholesky", is_matrix=x.dim() == 2)
    del info
    return factor


_COMPOSITES: dict[Any, Callable[..., Any]] = {
    aten.equal.default: _equal,
    aten.normal.Tensor_float: _normal_tensor_float,
    aten.normal.float_Tensor: _normal_float_tensor,
    aten.normal.Tensor_Tensor: _normal_tensor_tensor,
    aten.count_nonzero.dim_IntList: _count_nonzero,
    aten._unsafe_masked_index.default: _unsafe_masked_index,
    aten._unsafe_masked_index_put_accumulate.default: _unsafe_masked_index_put_accumulate,
    aten.median.default: _median_all,
    aten.nanmedian.default: _nanmedian_all,
    aten.masked_scatter.default: _masked_scatter,
    aten.masked_scatter_backward.default: _masked_scatter_backward,
    aten.searchsorted.Tensor: _searchsorted,
    aten.multilabel_margin_loss_forward.default: _multilabel_margin_loss,
    aten.soft_margin_loss_backward.default: _soft_margin_loss_backward,
    aten.searchsorted.Scalar: _searchsorted,
}


if hasattr(aten, "cholesky"):  # removed after torch 2.13
    _COMPOSITES[aten.cholesky.default] = _cholesky


_BY_KEY: dict[Any, DispatchKey] = {
    aten.isinf.default: DispatchKey.CompositeExplicitAutograd,
    aten.dist.default: DispatchKey.CompositeExplicitAutograd,
    aten.mvlgamma.default: DispatchKey.CompositeExplicitAutograd,
    aten.logsumexp.default: DispatchKey.CompositeExplicitAutograd,
    aten.logsumexp.out: DispatchKey.CompositeExplicitAutogradNonFunctional,
    aten.count_nonzero.default: DispatchKey.CompositeExplicitAutograd,
    aten.ldexp.Tensor: DispatchKey.CompositeExplicitAutograd,
    aten._safe_softmax.default: DispatchKey.CompositeExplicitAutograd,
    aten._trilinear.default: DispatchKey.CompositeExplicitAutogradNonFunctional,
}


def cuda_composite(func: Any) -> Callable[..., Any] | None:
    """The ATen ops ``func``'s CUDA kernel runs, as a function of its arguments, or None."""
    key = _BY_KEY.get(func)
    if key is not None:
        return functools.partial(func._op_dk, key)
    return _COMPOSITES.get(func)
