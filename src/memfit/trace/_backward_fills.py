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

from typing import Any

import torch

__all__ = ["FILLING_NODES", "FILLS_IN_PLACE", "ZEROS_FILLED_IN_PLACE"]

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
# scatter of max/min/sort/topk, ``trace_backward``'s diagonal): in place on the GPU when the
# zeros are the node's own (``Recorder._fresh_in_backward(zeros_only=True)``)
ZEROS_FILLED_IN_PLACE: dict[Any, Any] = {
    aten.scatter.src: aten.scatter_.src,
    aten.scatter.value: aten.scatter_.value,
    aten.index_fill.int_Tensor: aten.index_fill_.int_Tensor,
    aten.index_fill.int_Scalar: aten.index_fill_.int_Scalar,
}
