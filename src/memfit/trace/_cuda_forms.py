"""Ops that the trace, a Python dispatch mode, would see in another form than CUDA runs them.

The recorder runs them in CUDA's form, so that the allocations it records are the GPU's:

* :data:`EXPLICIT_COMPOSITES` have no CUDA kernel: CUDA runs their composite kernel, whose
  pieces allocate, while a meta kernel registered for each would make the output alone;
* :data:`IN_PLACE` maps out-of-place ops to the in-place ones that backward formulas call on
  the GPU (``Recorder._fresh_in_backward`` says when).
"""

from __future__ import annotations

from typing import Any

import torch
from torch._C import DispatchKey

__all__ = ["EXPLICIT_COMPOSITES", "IN_PLACE"]

aten = torch.ops.aten

# Ops CUDA runs through a composite kernel (none of their own, or one of ATen ops only), whose
# pieces allocate beyond the output, by the dispatch key of that kernel; the meta kernel
# registered for each would make the output alone. H100 traces, torch 2.11: ``isinf`` takes
# ``abs`` of its input first, ``dist`` the difference of its inputs, ``mvlgamma`` an (n, p)
# ``lgamma`` table, ``logsumexp`` (through its ``out=`` form) the maxima, their infinity mask and
# the shifted input.
EXPLICIT_COMPOSITES: dict[Any, DispatchKey] = {
    aten.isinf.default: DispatchKey.CompositeExplicitAutograd,
    aten.dist.default: DispatchKey.CompositeExplicitAutograd,
    aten.mvlgamma.default: DispatchKey.CompositeExplicitAutograd,
    aten.logsumexp.default: DispatchKey.CompositeExplicitAutograd,
    aten.logsumexp.out: DispatchKey.CompositeExplicitAutogradNonFunctional,
    aten.count_nonzero.default: DispatchKey.CompositeExplicitAutograd,
    # (``count_nonzero.dim_IntList``'s CUDA kernel is ATen ops only: ``_cuda_composites``, as
    # a CPU build of torch has no CUDA kernel to call)
}

# backward formulas that write into zeros they just made in place unless a tensor is
# "subclass-like", which any Python dispatch mode makes them all (FunctionsManual.cpp):
# max/min/sort/topk's ``value_selecting_reduction_backward`` scatters into them,
# ``trace_backward`` fills their diagonal
IN_PLACE = {
    aten.scatter.src: aten.scatter_.src,
    aten.scatter.value: aten.scatter_.value,
    aten.index_fill.int_Tensor: aten.index_fill_.int_Tensor,
    aten.index_fill.int_Scalar: aten.index_fill_.int_Scalar,
}
