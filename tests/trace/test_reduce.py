"""Reduction scratch sizes against allocations recorded on an H200 (torch 2.11 traces in
benchmarks/results/2026-11-30-h200-estimate-accuracy/traces): buffer bytes, then semaphore bytes."""

import pytest
import torch

from memfit.trace._reduce import reduce_op_scratch, reduction_scratch, renorm_scratch

H200 = (132, 2048)


@pytest.mark.parametrize(
    ("shape", "dtype", "dims", "expected"),
    [
        ((6304, 768), torch.float32, [0], (38_928_384, 24)),  # ViT-B/16 fp32 b32 bias grad
        ((32, 197, 768), torch.float32, [0, 1], (38_928_384, 24)),  # same, unflattened
        ((16384, 768), torch.float32, [0], (100_663_296, 24)),  # BERT-base b32 s512
        ((8192, 768), torch.float32, [0], (50_331_648, 24)),  # GPT-2 b8 s1024
        ((12608, 768), torch.bfloat16, [0], (77_463_552, 24)),  # ViT b64 bf16
        ((12544, 768), torch.bfloat16, [0], (77_070_336, 24)),  # ViT b64, patch tokens only
    ],
)
def test_split_reductions_match_the_gpu(shape, dtype, dims, expected):
    x = torch.empty(shape, dtype=dtype, device="meta")
    assert reduction_scratch(x, dims, *H200) == expected


def test_small_or_wide_reductions_need_no_buffer():
    assert reduction_scratch(torch.empty(64, 768, device="meta"), [0], *H200) is None
    assert reduction_scratch(torch.empty(768, 64, device="meta"), [1], *H200) is None


def test_a_permuted_dense_input_is_reduced_in_its_memory_order():
    # TensorIterator reorders the dims by stride: a transposed matrix reduces as the
    # contiguous one it views
    x = torch.empty(6304, 768, device="meta")  # ViT-B/16 fp32 b32's bias gradient, viewed
    assert reduction_scratch(x.t(), [1], *H200) == (38_928_384, 24)  # as from (768, 6304)


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        # a convolution's bias gradient, grad.sum((0, 2, 3)) of a channels-last bf16 grad:
        ((128, 768, 14, 14), (138_412_032, 24)),  # ViT-B/16 b128 patch embedding
        ((64, 768, 7, 7), (19_267_584, 24)),  # ConvNeXt-T b64 last stage
    ],
)
def test_a_channels_last_bias_gradient_matches_the_gpu(shape, expected):
    x = torch.empty(shape, dtype=torch.bfloat16, device="meta")
    x = x.contiguous(memory_format=torch.channels_last)
    assert reduction_scratch(x, [0, 2, 3], *H200) == expected


def test_an_overlapping_input_is_not_modelled():
    x = torch.empty(768, 1, device="meta").expand(768, 6304)
    assert reduction_scratch(x, [1], *H200) is None


aten = torch.ops.aten
H100 = (132, 2048)


def _meta(n, dtype):
    return torch.empty(n, dtype=dtype, device="meta")


@pytest.mark.parametrize(
    ("func", "n", "dtype", "expected"),
    [
        # H100 traces, torch 2.11 (the op sweep): full reductions' partial results follow
        # each kernel's accumulator type
        (aten.prod.default, 4_096_000, torch.bfloat16, 2_000),  # float
        (aten.max.default, 4_096_000, torch.bfloat16, 1_000),  # the input's own type
        (aten.max.default, 512_000, torch.float32, 252),
        (aten.aminmax.default, 4_096_000, torch.bfloat16, 2_000),  # a pair of it
        (aten.aminmax.default, 512_000, torch.float32, 504),
        (aten.std.correction, 4_096_000, torch.bfloat16, 8_000),  # a Welford record
        (aten.var_mean.correction, 512_000, torch.float32, 1_008),
        (aten.std.correction, 409_600, torch.float32, 800),
        (aten.linalg_vector_norm.default, 409_600, torch.float32, 200),
        (aten.all.default, 409_600, torch.bool, 50),  # a bool (equal's eq(a, b).all())
    ],
)
def test_each_reduction_accumulates_in_its_own_type(func, n, dtype, expected):
    got = reduce_op_scratch(func, (_meta(n, dtype),), {}, *H100)
    assert got == [(expected, "reduction partial results"), (4, "reduction semaphores")]


def test_a_boolean_sum_copies_its_input_to_int64_first():
    # count_nonzero of 15 elements on an H100: the 8-byte output, then a 120-byte copy
    mask = _meta(15, torch.bool)
    assert reduce_op_scratch(aten.sum.dim_IntList, (mask, []), {}, *H100) == [
        (120, "reduction input cast")
    ]
    half = _meta(15, torch.bfloat16)  # read as it is when summed into float32
    assert reduce_op_scratch(aten.sum.default, (half,), {"dtype": torch.float32}, *H100) == []
    assert reduce_op_scratch(aten.sum.default, (half,), {}, *H100) == []


def test_renorm_holds_its_norms_over_the_reduction_then_takes_scale_factors():
    # H100, torch 2.11, renorm(x, 2, -1, 0.5) of (160, 160, 160) bf16
    x = torch.empty(160, 160, 160, dtype=torch.bfloat16, device="meta")
    assert renorm_scratch((x, 2, -1, 0.5), *H100) == [
        [
            (640, "renorm slice norms", True),
            (32_768_000, "reduction partial results"),
            (8, "reduction semaphores"),
        ],
        [(320, "renorm scale factors")],
    ]
    # float32, (80, 80, 80) over dim 1: the norms alone, no factors of another type
    y = torch.empty(80, 80, 80, device="meta")
    assert renorm_scratch((y, 2, 1, 0.5), *H100) == [[(320, "renorm slice norms", True)]]


def test_a_half_sum_past_32_bit_indexing_accumulates_into_a_float_buffer():
    # H100 op sweep, torch 2.11: expand's backward sums a 4,194,304,000-byte bf16 gradient
    # into 1,638,400 outputs through a float32 buffer of one value per output
    big = torch.empty(1280, 1638400, dtype=torch.bfloat16, device="meta")
    got = reduce_op_scratch(torch.ops.aten.sum.dim_IntList, (big, [0]), {}, *H200)
    assert got[0] == (1638400 * 4, "reduction accumulation buffer")
    float_sum = reduce_op_scratch(torch.ops.aten.sum.dim_IntList, (big.float(), [0]), {}, *H200)
    assert all(label != "reduction accumulation buffer" for _, label in float_sum)


def test_a_max_over_a_view_spanning_2_gib_accumulates_value_index_pairs():
    # H100 zoo (transformers' Hiera, bf16 inference at batch 1024): the query, a third of the
    # 3.7 GB qkv output viewed as (B, heads, windows, stride, tokens, dim), reduced by
    # max(dim=3): TensorIterator cannot index the view in 32 bits, so the pieces accumulate
    # into a buffer of one (value, int64 index) pair per output, 16 bytes
    b, windows, tokens, heads, dim = 1024, 49, 64, 2, 96
    qkv = torch.empty(b * tokens * windows, 3 * heads * dim, dtype=torch.bfloat16, device="meta")
    query = qkv.reshape(b, -1, windows, 3, heads, dim).permute(3, 0, 4, 2, 1, 5)[0]
    strided = query.view(b, heads, windows, 4, -1, dim)
    got = reduce_op_scratch(torch.ops.aten.max.dim, (strided, 3), {}, *H200)
    assert got == [(2_466_250_752, "reduction accumulation buffer")]
    # the same reduction of a dense copy (under 2 GiB) takes none
    dense = torch.empty(strided.shape, dtype=torch.bfloat16, device="meta")
    assert reduce_op_scratch(torch.ops.aten.max.dim, (dense, 3), {}, *H200) == []


def test_an_int64_sum_keeps_eight_byte_partial_results():
    # a mixture of experts' int64 expert mask summed over its tokens (H100, torch 2.11:
    # 230,686,720 bytes of partial results for int64[14336, 12, 320] summed over dim 0)
    x = torch.empty(14336, 12, 320, dtype=torch.int64, device="meta")
    wide = torch.empty(14336, 12, 320, dtype=torch.float32, device="meta")

    def scratch(t: torch.Tensor) -> dict[str, int]:
        return {
            label: n for n, label in reduce_op_scratch(aten.sum.dim_IntList, (t, [0]), {}, *H100)
        }

    summed, floats = scratch(x), scratch(wide)
    assert summed["reduction partial results"] == 2 * floats["reduction partial results"]
    assert "reduction input cast" not in summed
