"""CUDA's accumulating ``index_put_``: the scratch of its sort-based kernel.

``x.index_put_(indices, values, accumulate=True)`` (and so the backward of every advanced
index ``x[idx]``, ``index_backward``'s ``_index_put_impl_`` into zeros) runs on CUDA as
``index_put_with_sort_kernel`` (ATen's cuda/Indexing.cu). It folds the indices, broadcast to
one shape of ``n`` elements, into one int64 linear index (``computeLinearIndex``: each index
wrapped by ``remainder`` and scaled by its dim's stride, the first kept as the linear index,
the others added into it), makes ``self`` contiguous with the indexed dims first when they are
not already (a copy of ``self``, written back at the end), allocates the sorted indices, their
original positions and an ``arange`` of ``n`` (int64 each), and sorts (index, position)
pairs with cub's radix sort on the bits the largest linear index needs. All of it lives to the
kernel's end and is freed last-first. H100 traces, torch 2.11: the backward of
``x[:, [0, 1], :, [0, 1]]`` on a 40^4 float32 ``x`` copies its 10,240,000 bytes;
``_unsafe_masked_index_put_accumulate`` of 511,920 indices into 64,000 elements allocates
4,095,360 bytes five times and 8,310,271 of cub storage.

A checked call (``index_put_``, not ``_index_put_impl_``'s ``unsafe`` one that autograd's
``index_backward`` makes) first bounds each broadcast index by its ``max``, then its ``min``
(``wrapIndexOnce``), each an int64 scalar reduced over a contiguous copy of the index where
it is broadcast, with a reduction's scratch for a large one, then compared with the dim's size
(a bool, freed at once), before its own wrapping. H100 traces, torch 2.11: for each of the
three indices of 511,920 broadcast elements above, 8, 4,095,360, 504 and 4, freed last first
but the 8, then 1 byte, freed, then the 8, twice.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from memfit.trace._scratch import Nested, Order, Scratch, radix_sort_storage

__all__ = ["ACCUMULATING_PUTS", "index_put_scratch"]

aten = torch.ops.aten
ACCUMULATING_PUTS = frozenset(
    {aten.index_put.default, aten.index_put_.default, aten._index_put_impl_.default}
)


# the checks' groups free their own blocks last first, then what the group before held (the
# bound, after its comparison): memfit.trace._scratch.group_frees
CHECKS_ORDER: Order = (True, "after")


def _sorted_put(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[list[tuple[int, torch.Tensor]], int] | None:
    """The defined indices (dim, index) and their broadcast element count of a put that runs
    the sort-based kernel; None for one that does not accumulate, indexes by a mask (the
    trace puts by its positions) or puts nothing."""
    x, indices = args[0], args[1]
    accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
    defined = [(d, i) for d, i in enumerate(indices) if isinstance(i, torch.Tensor)]
    if (
        not accumulate
        or not defined
        or any(i.dtype in (torch.bool, torch.uint8) for _, i in defined)
    ):
        return None
    n = math.prod(torch.broadcast_shapes(*(i.shape for _, i in defined)))
    if n == 0 or x.numel() == 0:
        return None
    return defined, n


def _bound_checks(
    index: torch.Tensor, n: int, reduction: Callable[[torch.Tensor], list[tuple[int, str]]]
) -> Nested:
    """A checked put's bounds on one index, ``max`` then ``min`` (module doc)."""
    broadcast = index.numel() != n or not index.is_contiguous()
    copy: list[Scratch] = [(8 * n, "index bound: contiguous index")] if broadcast else []
    flat = torch.empty(n, dtype=torch.int64, device="meta")
    bound: list[Scratch] = [(8, "index bound", True), *copy, *reduction(flat)]
    return Nested([bound, [(1, "index bound comparison")]] * 2, CHECKS_ORDER)


def index_put_scratch(
    func: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    reduction: Callable[[torch.Tensor], list[tuple[int, str]]],
) -> list[list[Scratch] | Nested]:
    """The sort-based kernel's scratch groups for an accumulating put (module doc), each index
    bounded first where the call is checked (``reduction``: an int64 reduction's scratch over
    a tensor); none for a put that does not accumulate or indexes by a mask (the trace puts
    by its positions)."""
    put = _sorted_put(args, kwargs)
    if put is None:
        return []
    x = args[0]
    defined, n = put
    unsafe = args[4] if len(args) > 4 else kwargs.get("unsafe", False)
    checked = not (func is aten._index_put_impl_.default and unsafe)
    index = 8 * n
    groups: list[list[Scratch] | Nested] = []
    for k, (_, i) in enumerate(defined):
        if checked:
            groups.append(_bound_checks(i, n, reduction))
        if k == 0:
            groups.append(
                [(index, "index put wrapped index"), (index, "index put linear index", True)]
            )
        else:
            groups.append([(index, "index put wrapped index"), (index, "index put scaled index")])
    dims = [d for d, _ in defined]
    if dims != list(range(len(dims))) or not x.is_contiguous():
        copy = x.numel() * x.element_size()
        groups.append([(copy, "index put input, indexed dims first", True)])
    groups.append(
        [
            (index, "index put sorted indices", True),
            (index, "index put original positions", True),
            (index, "index put position range", True),
        ]
    )
    slice_size = math.prod(int(s) for d, s in enumerate(x.shape) if d not in dims)
    bits = max(1, ((x.numel() - 1) // max(slice_size, 1)).bit_length())
    groups.append([(radix_sort_storage(n, 8, 8, bits), "cub radix sort storage")])
    return groups
