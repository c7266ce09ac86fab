"""Backward formulas that fill the zeros they make in place, except under a dispatch mode.

The backward of an op that selects values (``sort``, ``topk``, ``kthvalue``, ``mode``,
``median`` and ``max`` along a dim, ``cummax``, ``gather``, ``take``, ``index_select``) makes
a zero gradient of the input's size and writes the incoming gradient into it at the selected
places (``value_selecting_reduction_backward``, ``gather_backward``, ``cummaxmin_backward``,
``take_backward``, ``index_select_backward`` in FunctionsManual.cpp). It does so in place
(``scatter_``, ``scatter_add_``, ``put_``, ``index_add_``) unless a tensor is "subclass-like",
which any Python dispatch mode makes them all: then it calls the out-of-place op, and a trace
would allocate a second input-sized tensor the GPU never allocates (H100 traces, torch 2.11:
the backward of ``topk`` over 4,000,000 float32 elements makes one 16 MB gradient, not two).

Other formulas fill their own fresh tensors out of place whatever the tensors
(``index_reduce``'s mean: ``N.index_add(...)`` into ones or zeros it just made), so the rule
holds only inside the nodes in :data:`FILLING_NODES`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["REWRITTEN_IN_BACKWARD", "backward_form"]

aten = torch.ops.aten

FILLS_IN_PLACE: dict[Any, Any] = {
    aten.scatter.src: aten.scatter_.src,
    aten.scatter_add.default: aten.scatter_add_.default,
    aten.index_add.default: aten.index_add_.default,
    aten.put.default: aten.put_.default,
}

FILLING_NODES = frozenset(
    {
        *(f"{op}Backward0" for op in ("Sort", "Topk", "Kthvalue", "Mode", "Max", "Min")),
        *("SortBackward1", "MedianBackward1", "NanmedianBackward1"),
        *(f"{op}Backward0" for op in ("Cummax", "Cummin", "Gather", "Take", "IndexSelect")),
    }
)

# Any backward node's fill of zeros it just made (``value_selecting_reduction_backward``'s
# scatter of max/min/sort/topk, ``trace_backward``'s diagonal, ``masked_select_backward``'s
# ``masked_scatter_`` into zeros broadcast to the mask): in place on the GPU when the
# zeros are the node's own (``GradOwners.fresh(zeros_only=True)``)
ZEROS_FILLED_IN_PLACE: dict[Any, Any] = {
    aten.scatter.src: aten.scatter_.src,
    aten.scatter.value: aten.scatter_.value,
    aten.index_fill.int_Tensor: aten.index_fill_.int_Tensor,
    aten.index_fill.int_Scalar: aten.index_fill_.int_Scalar,
    aten.masked_scatter.default: aten.masked_scatter_.default,
}


def _selected_sum_input(mask: Any, grad: Any, other: Any) -> Any:
    return aten.masked_select.default(grad, mask)


def _unused_scalar(value: Any, **kwargs: Any) -> Any:
    from torch.utils._python_dispatch import _disable_current_modes

    kwargs["device"] = torch.device("cpu")  # the form it is made for does not run
    with _disable_current_modes():
        return torch.scalar_tensor(value, **kwargs)


# Formulas that take another form when a tensor is subclass-like, by the node that runs them:
# the op the trace sees there, and what the GPU runs instead. ``masked_fill_backward`` (a
# tensor value's gradient) sums ``grad.masked_select(mask)`` on the GPU, ``where(mask, grad,
# 0)`` under a dispatch mode (0 as a scalar tensor, then ``where``): a gradient-sized tensor
# where the GPU selects (H100 op sweep, torch 2.11: 1.6 MB for 409,600 float32 elements, the
# GPU 0.8 MB of selected values and nonzero's buffers).
_GPU_FORMS: dict[tuple[str, Any], Callable[..., Any]] = {
    ("MaskedFillBackward1", aten.scalar_tensor.default): _unused_scalar,
    ("MaskedFillBackward1", aten.where.self): _selected_sum_input,
}


# Formulas that update a tensor they just made in place on the GPU and out of place when a
# tensor is subclass-like, by node (``areAnyTensorSubclassLike`` in FunctionsManual.cpp):
# ``clamp_backward_min_max``'s masks (``logical_and_``, ``logical_or_``), ``atan2_backward``'s
# ``recip.masked_fill_``, the binary cross entropies' target gradients (``grad_target.mul_``),
# and ``evenly_distribute_backward``'s NaN mask of a full max, min or median (two
# input-sized booleans where the trace made three).
# H100 op sweep, torch 2.11: clamp with tensor bounds makes two masks a bound, not three.
_IN_PLACE_BY_NODE: dict[str, dict[Any, Any]] = {
    "ClampBackward0": {
        aten.logical_and.default: aten.logical_and_.default,
        aten.logical_or.default: aten.logical_or_.default,
    },
    "Atan2Backward0": {aten.masked_fill.Scalar: aten.masked_fill_.Scalar},
    "BinaryCrossEntropyBackward0": {aten.mul.Tensor: aten.mul_.Tensor},
    **{
        node: {aten.logical_and.default: aten.logical_and_.default}
        for node in ("MaxBackward1", "MinBackward1", "MedianBackward0", "NanmedianBackward0")
    },
    "BinaryCrossEntropyWithLogitsBackward0": {aten.mul.Tensor: aten.mul_.Tensor},
}
REWRITTEN_IN_BACKWARD = frozenset(
    {
        *(op for _, op in _GPU_FORMS),
        *(op for ops in _IN_PLACE_BY_NODE.values() for op in ops),
        *FILLS_IN_PLACE,
        *ZEROS_FILLED_IN_PLACE,
    }
)


def backward_form(
    func: Any, args: tuple[Any, ...], fresh: Callable[..., bool]
) -> tuple[Any, Callable[..., Any] | None]:
    """What the GPU runs for ``func`` (one of :data:`REWRITTEN_IN_BACKWARD`) in the backward node
    running now: ``(op, None)``, the op itself or its in-place form where it writes into a
    tensor the node just made (``fresh(tensor, zeros_only=, nodes=)``: the recorder's check), or
    ``(func, form)``, a function to run instead. Outside backward nodes, ``(func, None)``."""
    node = torch._C._current_autograd_node()
    name = "" if node is None else str(node.name())
    form = _GPU_FORMS.get((name, func))
    if form is not None:
        return func, form
    in_place = _IN_PLACE_BY_NODE.get(name, {}).get(func)
    if in_place is not None and fresh(args[0]):
        return in_place, None
    if func in FILLS_IN_PLACE and fresh(args[0], nodes=FILLING_NODES):
        return FILLS_IN_PLACE[func], None
    if func in ZEROS_FILLED_IN_PLACE and fresh(args[0], zeros_only=True):
        return ZEROS_FILLED_IN_PLACE[func], None
    return func, None
