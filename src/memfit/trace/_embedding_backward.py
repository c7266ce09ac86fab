"""CUDA's sort-based embedding backward: its scratch, shared by ``embedding`` and
``embedding_bag``.

``embedding_dense_backward`` for more than 3,072 indices (fewer run a direct kernel) and the
sum and mean modes of ``_embedding_bag_dense_backward`` sort the indices first (ATen's
cuda/Embedding.cu, EmbeddingBag.cu): the sorted indices and their original positions (int64,
held to the end), an ``arange`` of positions and cub's radix sort storage on all 64 bits
(freed once sorted). ``embedding_backward_cuda_kernel`` (EmbeddingBackwardKernel.cu) then
finds the segments of equal indices (their offsets and count, and a scratch copy of the keys,
freed once found), splits them in partial segments of at most 10 rows (per-segment counts and
their offsets, by a cub scan), and sums each partial segment's rows in float32 before adding
them to the gradient: ``n / 10 + min(n, vocabulary)`` rows. H100 traces, torch 2.11, 102,400
indices into 640 rows of 320: 819,200 bytes three times and 1,678,847 of cub storage, then
819,200 twice, 8, 5,120 twice, 1,279, 8, 87,040 and 13,926,400. H200 traces: 73,818,112 bytes
of partial sums for TinyLlama's 8,192 tokens of width 2,048, 55,363,584 for BERT-base's 16,384
of width 768. cub's storage for finding the segments is sized as for a select of int64
offsets (``select_storage``: H200 traces, 1,279 bytes for 4,096 to 16,384 indices, 2,047 for
T5's 262,144; H100, 1,535 for 102,400). The
weight gradient, allocated between the sort and the segments on the GPU, is the op's output
here, allocated before this scratch.
"""

from __future__ import annotations

from typing import Any

import torch

from memfit.trace._scratch import Scratch, radix_sort_storage, scan_storage, select_storage

__all__ = ["EMBEDDING_BACKWARDS", "embedding_backward_scratch"]

aten = torch.ops.aten
_DENSE = aten.embedding_dense_backward.default
_BAG = aten._embedding_bag_dense_backward.default
_BAG_ANY = aten._embedding_bag_backward.default  # CUDA's: the dense one unless sparse
EMBEDDING_BACKWARDS = frozenset({_DENSE, _BAG, _BAG_ANY})
_MAX = 2  # embedding bag's max mode: no sort


def embedding_backward_scratch(func: Any, args: tuple[Any, ...]) -> list[list[Scratch]]:
    """The scratch groups of a sort-based embedding backward (module doc), or none."""
    grad, indices = args[0], args[1]
    n = indices.numel()
    if func is _DENSE:
        num_weights = int(args[2])
        if n <= 3072:
            return []  # a direct kernel, no scratch
    else:
        num_weights, mode = (int(args[5]), args[7]) if func is _BAG else (int(args[6]), args[8])
        if int(mode) == _MAX or (func is _BAG_ANY and bool(args[9])):
            return []  # max mode, sparse gradient: no sort
    if n == 0:
        return []
    size = indices.element_size()  # int64 or int32, as every index buffer here
    index = n * size
    segments = min(n, num_weights)
    partials = n // 10 + segments
    return [
        [
            (index, "embedding backward sorted indices", True),
            (index, "embedding backward original positions", True),
            (index, "embedding backward position range"),
            (radix_sort_storage(n, size, size), "cub radix sort storage"),
        ],
        [
            (index, "embedding backward segment offsets", True),
            (8, "embedding backward segment count", True),
            (index, "embedding backward unique keys"),
            (select_storage(n, 16), "cub unique-by-key storage"),
        ],
        [
            (size * segments, "embedding backward partials per segment", True),
            (size * segments, "embedding backward partial offsets", True),
            (scan_storage(segments), "cub scan storage"),
        ],
        [
            (8, "embedding backward partial count", True),
            (size * partials, "embedding backward partial segment offsets", True),
            (partials * int(grad.shape[-1]) * 4, "embedding backward partial sums (float32)"),
        ],
    ]
