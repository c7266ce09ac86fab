"""What CUDA's ``nonzero`` allocates beside its output: cub's buffers, sized as cub sizes them.

``nonzero`` (ATen's cuda/Nonzero.cu) is behind every boolean mask: ``x[mask]``,
``masked_select``, ``index_put`` with a mask, ``argwhere``, ``where(cond)``. Its output's size
depends on the values, so the trace answers it from them (or bounds it); around that output the
kernel makes, in this order:

1. a contiguous copy of a non-contiguous input (an expanded mask), held to the end;
2. the count of nonzero elements, an ``int`` per chunk of 2**30 elements, held to the end;
3. ``cub::DeviceReduce::Sum``'s storage, freed at once: 1 byte for an input of one tile
   (256 threads x 20 items), else one ``int`` partial for each block cub may launch (8 blocks
   of 256 threads on each SM, 5 waves), aligned to 256 bytes, plus 255;
4. the output;
5. ``cub::DeviceSelect::Flagged``'s storage, freed at once (``_scratch.select_storage``).

H100 op sweep (torch 2.11, CUDA 13.0): 21,503 bytes of reduce storage for 64,000 to
262,144,000 elements; select storage 1,023 bytes for 64,000 elements and fewer, 1,791 for
409,600 and 512,000, 497,407 for 262,144,000.

``nonzero_static`` counts into ``int`` per-block sums and their ``int64`` running totals (one
each for every block of 512 x 16 items, the blocks spread over the SMs, twice as many for a
one-byte input), allocated after its output and freed last first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from memfit.trace._scratch import cub_storage, select_storage

__all__ = ["NONZERO", "NONZERO_STATIC", "around_nonzero", "nonzero_static_scratch"]

aten = torch.ops.aten
NONZERO = aten.nonzero.default
NONZERO_STATIC = aten.nonzero_static.default

_CHUNK = 2**30
_REDUCE_TILE = 256 * 20
_REDUCE_BLOCKS_PER_SM = 8 * 5


def _reduce_storage(n: int, sm_count: int) -> int:
    if n <= _REDUCE_TILE:
        return 1
    return cub_storage(sm_count * _REDUCE_BLOCKS_PER_SM * 4)


@contextmanager
def around_nonzero(
    x: Any,
    sm_count: int,
    alloc: Callable[[int, str], int],
    free: Callable[[int], None],
) -> Iterator[None]:
    """Record CUDA ``nonzero``'s buffers around its output, which the body records."""
    if not isinstance(x, torch.Tensor) or x.numel() == 0 or x.device.type != "meta":
        yield  # none, or a CPU mask: ATen selects on the CPU and copies the positions over
        return
    n = x.numel()
    chunks = [min(_CHUNK, n - start) for start in range(0, n, _CHUNK)]
    copy = None if x.is_contiguous() else alloc(n * x.element_size(), "nonzero contiguous input")
    count = alloc(4 * len(chunks), "nonzero count")
    for size in chunks:
        free(alloc(_reduce_storage(size, sm_count), "cub reduce storage"))
    yield
    if x.dim() > 0:
        for size in chunks:
            free(alloc(select_storage(size), "cub select storage"))
    free(count)
    if copy is not None:
        free(copy)


def nonzero_static_scratch(x: Any, size: int, sm_count: int) -> list[tuple[int, str]]:
    """``nonzero_static``'s per-block counts and running totals (after its output)."""
    if not isinstance(x, torch.Tensor) or x.numel() == 0 or size * max(x.dim(), 1) == 0:
        return []
    per_block = 512 * 16
    grid = -(-x.numel() // per_block)
    target = 2 * sm_count if x.element_size() == 1 else sm_count
    iters = -(-grid // target)
    grid = -(-x.numel() // (iters * per_block))
    return [(4 * grid, "nonzero_static block counts"), (8 * grid, "nonzero_static running totals")]
