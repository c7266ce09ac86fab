"""Scratch of CUDA kernels that several of memfit's rules share.

A sort allocates its own storage (cub's radix sort and its index buffers) beside its outputs;
a sort is also a step inside other kernels (torchvision's ``nms`` sorts its scores first), whose
rules count it the same way.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["SORTS", "Scratch", "group_frees", "sort_scratch"]

aten = torch.ops.aten

Scratch = tuple[int, str] | tuple[int, str, bool]  # bytes, label[, held into the next group]

SORTS = frozenset({aten.sort.default, aten.sort.stable})


def group_frees(
    blocks: list[tuple[int, bool]], held: list[int], last_first: bool
) -> tuple[list[int], list[int]]:
    """The blocks freed after one group of scratch is allocated, in order, and the group's
    blocks held into the next: ``blocks`` are the group's (block, held on), ``held`` those the
    group before kept. Freed first to last: ``held``, then the group's own; ``last_first``
    (a kernel whose scratch is C++ locals, destroyed in reverse) the group's last first, then
    ``held`` (an outer scope's), last first too."""
    own = [block for block, keep in blocks if not keep]
    kept = [block for block, keep in blocks if keep]
    if last_first:
        return [*reversed(own), *reversed(held)], kept
    return [*held, *own], kept


def sort_scratch(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[list[Scratch]]:
    """CUDA's sort of rows longer than 4,096 (``launch_stable_sort_kernel`` in ATen's
    SortStable.cu; shorter rows sort in place). For fewer than 128 rows (top-p sampling's sort
    of the scores) it sorts all rows at once: (index, row) pairs twice (8 bytes an element each,
    held to the end), a keys output and cub's radix sort storage (keys and pairs once more and
    its histograms), then a small sort of the row ids. H200 traces, torch 2.11, 32 x 151,936
    float32: 38,895,616 twice, 19,447,808 and 59,278,847 (0.19 bytes an element beyond keys
    and pairs; bfloat16 0.18, 8 x 32,000 0.20-0.23), then 867,839. Histograms are taken as a
    quarter byte an element, at least what was measured. Other row counts: from the source,
    with cub's storage taken the same way (not measured)."""
    x = args[0]
    dim = args[1] if len(args) > 1 and isinstance(args[1], int) else kwargs.get("dim", -1)
    if not isinstance(x, torch.Tensor) or x.dim() == 0 or x.numel() == 0:
        return []
    n, nsort, size = x.numel(), int(x.shape[dim]), x.element_size()
    rows = n // max(nsort, 1)
    if nsort <= 4096:
        return []
    if rows == 1 or nsort >= 1_000_000:  # row by row: one row's initial indices
        cub = nsort * (size + 8) + nsort // 4
        return [[(8 * nsort, "sort initial indices", True)], [(cub, "cub radix sort storage")]]
    if rows >= 128:  # cub's segmented sort, on reverse indices
        cub = n * (size + 8) + n // 4
        return [[(8 * n, "sort reverse indices", True)], [(cub, "cub segmented sort storage")]]
    pairs: list[Scratch] = [
        (8 * n, "sort (index, row) pairs", True),
        (8 * n, "sort (index, row) pairs, sorted", True),
        (size * n, "sort keys output"),
        (n * (size + 8) + n // 4, "cub radix sort storage"),
    ]
    return [pairs, [(n // 4, "cub row id sort storage")]]
