"""CUDA's embedding backward: its sort and float32 partial sums, as the H100 and H200 traces
show them."""

from __future__ import annotations

import torch

from memfit.trace._kernels import KernelModel

FUNC = torch.ops.aten.embedding_dense_backward.default


def _scratch(tokens: int, width: int, vocab: int) -> list[list[int]]:
    grad = torch.empty(tokens, width, dtype=torch.bfloat16, device="meta")
    ids = torch.empty(tokens, dtype=torch.int64, device="meta")
    groups = KernelModel(90).scratch(FUNC, (grad, ids, vocab, -1, False), {})
    return [[item[0] for item in group] for group in groups]


def test_sorted_path_sums_partial_segments_in_float32():
    # TinyLlama b4 s2048 (vocabulary 32,000, width 2,048) and BERT-base b32 s512 (30,522, 768)
    assert _scratch(8192, 2048, 32000)[-1][-1] == 73_818_112
    assert _scratch(16384, 768, 30522)[-1][-1] == 55_363_584


def test_sort_and_segments_as_the_h100_traced_them():
    """102,400 indices into 640 rows of 320: sorted indices, positions, range and cub's
    storage; segment offsets, count, a keys copy and cub's storage; per-segment partials and
    offsets with a cub scan; partial count, offsets and sums."""
    assert _scratch(102_400, 320, 640) == [
        [819_200, 819_200, 819_200, 1_678_847],
        [819_200, 8, 819_200, 1_535],
        [5_120, 5_120, 1_279],
        [8, 87_040, 13_926_400],
    ]


def test_a_vocabulary_smaller_than_the_batch_bounds_the_segments():
    assert _scratch(8192, 64, 100)[-1][-1] == (8192 // 10 + 100) * 64 * 4


def test_few_indices_take_the_direct_kernel_without_scratch():
    assert _scratch(3072, 2048, 32000) == []
