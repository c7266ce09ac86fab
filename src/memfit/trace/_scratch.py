"""Scratch of CUDA kernels that several of memfit's rules share.

A sort allocates its own storage (cub's radix sort and its index buffers) beside its outputs;
a sort is also a step inside other kernels (torchvision's ``nms`` sorts its scores first), whose
rules count it the same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "SORTS",
    "Nested",
    "Order",
    "Scratch",
    "chunk_cat_metadata",
    "cub_storage",
    "end_frees",
    "group_frees",
    "radix_sort_storage",
    "run_groups",
    "scan_storage",
    "segment_reduce_scratch",
    "select_storage",
    "sort_scratch",
]

aten = torch.ops.aten

# bytes, label[, held: kept to the kernel's end, freed last-first after every group's scratch]
Scratch = tuple[int, str] | tuple[int, str, bool]

SORTS = frozenset({aten.sort.default, aten.sort.stable})


Order = tuple[bool, str]  # (last first, when held blocks go: "before", "after" or "end")


@dataclass(frozen=True)
class Nested:
    """Scratch groups among a kernel's own that free in an order of their own, holding blocks
    among themselves only (a checked ``index_put_``'s bounds on each index, between the
    index computations whose blocks the kernel holds to its end)."""

    groups: list[list[Scratch]]
    order: Order


def group_frees(
    blocks: list[tuple[int, bool]], held: list[int], order: Order
) -> tuple[list[int], list[int]]:
    """The blocks freed once one group of a kernel's scratch is allocated, in order, and the
    blocks held on: ``blocks`` are the group's (block, held), ``held`` those held from the
    groups before. ``order``: whether each set is freed last first (C++ locals: a reduction's
    semaphores, then its partial results), and when the held blocks go: ``"before"`` this
    group's own (the memory-efficient attention backward's delta before its workspace),
    ``"after"`` them (an outer scope: ``renorm``'s norms after its scale factors), or at the
    kernel's ``"end"`` (a sort's pairs, an accumulating ``index_put``'s sort): see
    :func:`end_frees`."""
    last_first, when = order
    own = [block for block, keep in blocks if not keep]
    kept = [block for block, keep in blocks if keep]
    if last_first:
        own, earlier = own[::-1], held[::-1]
    else:
        earlier = held
    if when == "end":
        return own, [*held, *kept]
    return ([*earlier, *own] if when == "before" else [*own, *earlier]), kept


def run_groups(
    groups: Sequence[list[Scratch] | Nested],
    order: Order,
    alloc: Callable[[Scratch], int],
    free: Callable[[list[int]], None],
) -> None:
    """Allocate a kernel's scratch groups one after another through ``alloc`` and free them
    through ``free`` as :func:`group_frees` says, a nested run in its own order; what they
    hold goes when the kernel ends (:func:`end_frees`)."""
    held: list[int] = []
    for group in groups:
        if isinstance(group, Nested):
            run_groups(group.groups, group.order, alloc, free)
            continue
        blocks = [(alloc(item), item[2:] == (True,)) for item in group]
        frees, held = group_frees(blocks, held, order)
        free(frees)
    free(end_frees(held, order))


def end_frees(held: list[int], order: Order) -> list[int]:
    """The held blocks freed when the kernel ends, in order (:func:`group_frees`)."""
    return held[::-1] if order[0] or order[1] == "end" else held


def sort_scratch(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[list[Scratch]]:
    """CUDA's sort of rows longer than 4,096 (``launch_stable_sort_kernel`` in ATen's
    SortStable.cu). Shorter rows sort in place, their elements numbered first by an int64
    ``arange`` of the dim, freed before the sort (``fillSliceWithIndex`` in Sort.cpp). For
    fewer than 128 rows (top-p sampling's sort of the scores) it sorts all rows at once:
    (index, row) pairs twice (8 bytes an element each, held to the end), a keys output and
    cub's radix sort storage (:func:`radix_sort_storage`), then a small sort of the row ids.
    H200 traces, torch 2.11, 32 x 151,936 float32: 38,895,616 twice, 19,447,808 and
    59,278,847, then 867,839. Other row counts: from the source, with cub's segmented sort
    storage taken as keys and pairs once more and a quarter byte an element (not measured).
    The initial indices are held to the end, freed after cub's storage (H100 traces)."""
    x = args[0]
    dim = args[1] if len(args) > 1 and isinstance(args[1], int) else kwargs.get("dim", -1)
    if not isinstance(x, torch.Tensor) or x.dim() == 0 or x.numel() == 0:
        return []
    n, nsort, size = x.numel(), int(x.shape[dim]), x.element_size()
    rows = n // max(nsort, 1)
    if nsort <= 4096:  # in place, by index ranks from an int64 ``arange`` of the dim
        return [[(8 * nsort, "sort index range")]]
    if rows == 1 or nsort >= 1_000_000:  # row by row: one row's initial indices
        cub = radix_sort_storage(nsort, size, 8)
        return [[(8 * nsort, "sort initial indices", True)], [(cub, "cub radix sort storage")]]
    if rows >= 128:  # cub's segmented sort, on reverse indices
        cub = n * (size + 8) + n // 4
        return [[(8 * n, "sort reverse indices", True)], [(cub, "cub segmented sort storage")]]
    pairs: list[Scratch] = [
        (8 * n, "sort (index, row) pairs", True),
        (8 * n, "sort (index, row) pairs, sorted", True),
        (size * n, "sort keys output"),
        (radix_sort_storage(n, size, 8), "cub radix sort storage"),
    ]
    return [pairs, [(n // 4, "cub row id sort storage")]]


_RADIX_DIGITS = 256  # cub's onesweep sort: 8 bits a pass
_ALIGN = 256  # cub aligns each temporary and adds ALIGN - 1 bytes to the total


def radix_sort_storage(n: int, key_size: int, value_size: int, bits: int | None = None) -> int:
    """Bytes of the temporary storage cub's onesweep radix sort of ``n`` (key, value) pairs
    on ``bits`` of the keys (all by default) asks for (``DispatchRadixSort::InvokeOnesweep``,
    which ATen's ``radix_sort_pairs`` runs): 64-bit histograms of each 8-bit pass, a 32-bit
    lookback slot per digit and tile, an alternate keys and values buffer (none for a one-pass
    sort), 32-bit counters per pass, each rounded up to 256 bytes, plus 255 bytes of
    alignment. A tile is 256 threads of 22 pairs with 2-byte keys, 21 with 4-byte keys, 18
    with 8-byte keys (H100 and H200 traces, torch 2.11, int64 values: 512,000 float32 keys
    6,251,007 bytes, 4,096,000 bfloat16 keys 41,710,079, 4,861,952 float32 keys 59,278,847,
    511,920 int64 keys on 16 bits 8,310,271). A sort that fits one tile of cub's single-tile
    kernel asks for 1 byte; that tile is taken as 256 threads of 19 pairs, 9 with 8-byte keys
    or values (cub's policy, not measured)."""
    passes = -(-(8 * key_size if bits is None else bits) // 8)
    if n <= 256 * (9 if max(key_size, value_size) > 4 else 19):
        return 1
    tile = 256 * {1: 22, 2: 22, 4: 21}.get(key_size, 18)
    parts = [
        passes * _RADIX_DIGITS * 8,
        -(-n // tile) * _RADIX_DIGITS * 4,
        n * key_size if passes > 1 else 0,
        n * value_size if passes > 1 else 0,
        passes * 4,
    ]
    return cub_storage(*parts)


def cub_storage(*parts: int) -> int:
    """Bytes of the temporary storage cub asks for to hold ``parts``: each part aligned to
    256 bytes, and 255 more to align the whole."""
    return sum(-(-p // _ALIGN) * _ALIGN for p in parts) + _ALIGN - 1


def select_storage(n: int, state_bytes: int = 8) -> int:
    """Bytes of the temporary storage cub's select-type passes ask for over ``n`` items
    (``DeviceSelect::Flagged`` for ``nonzero``, ``UniqueByKey`` for the embedding backward's
    segments): a tile state of ``state_bytes`` for each tile of 4,224 items and 32 more,
    rounded up to 256 bytes, one 256-byte block and 255 bytes of alignment (H100 traces,
    torch 2.11: nonzero 1,023 bytes up to 64,000 items, 1,791 for 512,000; the unique pass,
    16-byte states, 1,535 for 102,400)."""
    tiles = -(-n // 4224) + 32
    return cub_storage(tiles * state_bytes, _ALIGN)


def scan_storage(n: int) -> int:
    """Bytes of the temporary storage cub's exclusive scan of ``n`` elements into int64 asks
    for (``mask_exclusive_sum``): a 16-byte tile descriptor for each tile of 896 elements and
    32 more, rounded up to 256 bytes, one 256-byte block and 255 bytes of alignment (H100
    traces, torch 2.11: 8,447 bytes for 409,600 mask elements, 4,682,239 for 262,144,000)."""
    tiles = -(-n // 896) + 32
    return cub_storage(tiles * 16, _ALIGN)


_CHUNK_CAT_BLOCK_BYTES = 16 * 128  # BYTES_PER_THREAD x BLOCK_SIZE (cuda/TensorShape.cu)


def chunk_cat_metadata(args: tuple[Any, ...]) -> list[tuple[int, str]]:
    """``_chunk_cat`` of dense inputs (FSDP2's gradient reduce-scatter input): after its
    output, the kernel's metadata packed into one int64 tensor copied to the GPU, freed when
    it returns (``pack_vecs``): per input its pointer, its bytes, its padded chunk's bytes and
    block count, the running start byte and block (one more each), and for every block of a
    padded chunk (2,048 bytes) its input's index. H100 op sweep, torch 2.11: 304 and 296
    bytes for five inputs."""
    tensors, dim, chunks = args[0], int(args[1]), int(args[2])
    if not tensors or not all(_dense(t) for t in tensors):
        return []  # the composite runs: no metadata
    blocks = 0
    for t in tensors:
        d = dim % t.dim()
        trailing = math.prod(int(n) for n in t.shape[d + 1 :])
        padded = -(-int(t.shape[d]) // chunks) * chunks
        chunk_bytes = padded * trailing * t.element_size() // chunks
        blocks += -(-chunk_bytes // _CHUNK_CAT_BLOCK_BYTES)
    return [(8 * (6 * len(tensors) + 2 + blocks), "chunk_cat metadata")]


def _dense(t: torch.Tensor) -> bool:
    """Non-overlapping and dense: contiguous in some order of its dims."""
    strides = t.stride()
    order = sorted(range(t.dim()), key=lambda d: -strides[d])
    return t.permute(order).is_contiguous()


def segment_reduce_scratch(kwargs: dict[str, Any]) -> list[list[Scratch]]:
    """CUDA's ``segment_reduce`` and its backward over 1-d ``lengths`` or ``offsets``, after the
    output (SegmentReduce.cu): from lengths, an 8-byte scalar, then the offsets (one more than
    the segments, int64, held to the end) and cub's scan of them; from offsets, the lengths
    (one fewer), freed at once. H100 op sweep, torch 2.11, 5 segments: 8, 48, 1,279; 40."""
    lengths, offsets = kwargs.get("lengths"), kwargs.get("offsets")
    if isinstance(lengths, torch.Tensor) and lengths.dim() == 1:
        count = int(lengths.numel())
        offsets_of: list[Scratch] = [
            (8, "segment reduce scalar"),
            (8 * (count + 1), "segment offsets", True),
        ]
        return [offsets_of, [(scan_storage(count), "cub scan storage")]]
    if isinstance(offsets, torch.Tensor) and offsets.dim() == 1 and offsets.numel() > 1:
        return [[(8 * (int(offsets.numel()) - 1), "segment lengths")]]
    return []
