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

A checked call (``index_put_``, not ``unsafe``) also bounds each index by its ``max`` and
``min`` first: 8 bytes each (and a reduction's scratch for a large index), not counted here.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from memfit.trace._scratch import Scratch, radix_sort_storage

__all__ = ["ACCUMULATING_PUTS", "index_put_scratch"]

aten = torch.ops.aten
ACCUMULATING_PUTS = frozenset(
    {aten.index_put.default, aten.index_put_.default, aten._index_put_impl_.default}
)


def index_put_scratch(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[list[Scratch]]:
    """The sort-based kernel's scratch groups for an accumulating put (module doc); none for
    a put that does not accumulate or indexes by a mask (the trace puts by its positions)."""
    x, indices = args[0], args[1]
    accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
    defined = [(d, i) for d, i in enumerate(indices) if isinstance(i, torch.Tensor)]
    if (
        not accumulate
        or not defined
        or any(i.dtype in (torch.bool, torch.uint8) for _, i in defined)
    ):
        return []
    n = math.prod(torch.broadcast_shapes(*(i.shape for _, i in defined)))
    if n == 0 or x.numel() == 0:
        return []
    index = 8 * n
    groups: list[list[Scratch]] = [
        [(index, "index put wrapped index"), (index, "index put linear index", True)]
    ]
    groups += [[(index, "index put wrapped index"), (index, "index put scaled index")]] * (
        len(defined) - 1
    )
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
