"""Indexing, sorting and selecting ops traced one call at a time (op sweep style): the
allocations the H100's caching allocator recorded for the same calls (torch 2.11)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from tests.op_sweep_support import Op as _Op
from tests.op_sweep_support import SampleInput, tokens, trace_case

from memfit.trace._scratch import radix_sort_storage, scan_storage


def _seq(text):
    """Tokens written as one string: ``+SIZE`` an allocation, ``-SIZE`` its free."""
    return text.split()


def _toks(fn, x, direction, *args, **kwargs):
    got = trace_case(_Op(fn), SampleInput(x, args=args, kwargs=kwargs), direction)
    return [f"{sign}{size}" for sign, size in tokens(got["events"])]


def test_cub_storage_by_its_parts():
    assert radix_sort_storage(512_000, 4, 8) == 6_251_007
    assert radix_sort_storage(4_096_000, 2, 8) == 41_710_079
    assert radix_sort_storage(4_861_952, 4, 8) == 59_278_847
    assert radix_sort_storage(511_920, 8, 8, bits=16) == 8_310_271
    assert radix_sort_storage(2, 8, 8) == 1  # one tile: cub asks for a byte
    assert scan_storage(409_600) == 8_447
    assert scan_storage(262_144_000) == 4_682_239


def test_sort_frees_cubs_storage_before_its_initial_indices():
    x = torch.randn(512_000)
    assert _toks(torch.sort, x, "forward") == _seq(
        "+2048000 +4096000 +4096000 +6251007 -6251007 -4096000 -2048000 -4096000"
    )


def test_topk_backward_scatters_into_its_zeros_in_place():
    x = torch.randn(1000, 1000, requires_grad=True)
    assert _toks(torch.topk, x, "backward", 10) == _seq(
        "+40000 +80000 +40000 +4000000 -80000 -40000 -40000 -4000000"
    )


def test_gather_backward_adds_into_its_zeros_in_place():
    x = torch.randn(320, 640, requires_grad=True)
    index = torch.randint(0, 640, (320, 320))
    assert _toks(torch.gather, x, "backward", 1, index) == _seq(
        "+409600 +409600 +819200 -409600 -409600 -819200"
    )


def test_index_reduce_mean_counts_and_its_backward_adds_out_of_place():
    x = torch.randn(1000, 256, dtype=torch.bfloat16, requires_grad=True)
    index = torch.randint(0, 1000, (2000,))
    source = torch.randn(2000, 256, dtype=torch.bfloat16, requires_grad=True)
    forward = _toks(torch.Tensor.index_reduce, x, "forward", 0, index, source, "mean")
    assert forward == _seq("+512000 +512000 +1024000 -1024000 +256000 -256000 -512000 -512000")
    backward = _toks(torch.Tensor.index_reduce, x, "backward", 0, index, source, "mean")
    # the backward's N = ones_like(grad).index_add(...): a new tensor, then the ones go
    assert backward[7:13] == _seq("+512000 +512000 +1024000 +512000 -512000 -1024000")


def test_scatter_reduce_mean_holds_ones_and_counts():
    x = torch.randn(200, 1024, dtype=torch.bfloat16)
    index = torch.randint(0, 200, (100, 1024))
    src = torch.randn(100, 1024, dtype=torch.bfloat16)
    got = _toks(torch.Tensor.scatter_reduce, x, "forward", 0, index, src, "mean")
    assert got == _seq("+409600 +204800 +409600 +204800 -204800 -409600 -204800 -409600")


def test_median_of_all_sorts_then_picks():
    x = torch.randn(3, 5)
    assert _toks(torch.median, x, "forward") == _seq("+60 +120 +120 -120 -120 +1 +4 -1 -60 -4")


def test_nanmedian_of_all_picks_by_an_index_it_computes_on_the_gpu():
    # H100 op sweep, torch 2.11, 15 float32: the sort, the NaN mask and its count (through an
    # int64 copy), (size - 1 - count), its float half and that half's int64 copy, the
    # statement's temporaries freed last first, then the picked value; the index, the values
    x = torch.randn(3, 5)
    assert _toks(torch.nanmedian, x, "forward") == _seq(
        "+60 +120 +120 -120 -120 +15 +8 +120 -120 +8 +4 +8 -4 -8 -8 -15 +4 -8 -60 -4"
    )


def test_mode_along_an_inner_dim_copies_its_input():
    x = torch.randn(80, 80, 80)
    assert _toks(torch.mode, x, "forward", 1) == _seq(
        "+25600 +51200 +2048000 -2048000 -25600 -51200"
    )


def test_unfold_resizes_an_input_sized_output():
    x = torch.randn(2, 3, 5, 5, requires_grad=True)
    assert _toks(F.unfold, x, "forward", 2, 1, 0, 1) == _seq("+600 +1536 -600 -1536")
    assert _toks(F.unfold, x, "forward", 2, 1, 0, 2) == _seq("+600 -600")


def test_unfold_backward_indexes_the_dim():
    x = torch.randn(40, 40, 40, 40, dtype=torch.bfloat16, requires_grad=True)
    got = _toks(torch.Tensor.unfold, x, "backward", 0, 3, 1)
    assert "+320" in got and got[got.index("+320") + 1] == "-320"


def test_masked_scatter_prefix_sums_its_mask():
    x = torch.randn(640, 640, dtype=torch.bfloat16)
    mask = torch.rand(640) < 0.5
    source = torch.randn(640, 640, dtype=torch.bfloat16)
    assert _toks(torch.masked_scatter, x, "forward", mask, source) == _seq(
        "+819200 +3276800 +409600 +8447 -8447 -409600 -3276800 -819200"
    )


def test_nll_loss_2d_sizes_its_total_weight_first():
    x = torch.randn(2, 3, 4, 4)
    target = torch.randint(0, 3, (2, 4, 4))
    got = _toks(F.nll_loss, x, "forward", target, reduction="none")
    assert got == _seq("+4 +128 -4 -128")


def test_accumulating_index_put_sorts_its_linear_index():
    x = torch.randn(640, 640)
    index = torch.tensor([3, 7])
    values = torch.randn(2, 640)
    got = _toks(torch.index_put, x, "forward", (index,), values, accumulate=True)
    # clone; the index's max and min, each compared with the dim's size; wrapped and linear
    # index; sorted, positions, range; cub's single tile (H100, torch 2.11)
    bounds = "+8 +1 -1 -8 +8 +1 -1 -8"
    sort = "+16 +16 -16 +16 +16 +16 +1 -1 -16 -16 -16 -16"
    assert got == _seq(f"+1638400 {bounds} {sort} -1638400")
    # autograd's put into the zero gradient is unchecked: no bounds
    unchecked = torch.ops.aten._index_put_impl_
    got = _toks(unchecked, x, "forward", (index,), values, True, True)
    assert got == _seq(sort)  # in place: no clone


def test_index_backward_copies_an_input_indexed_off_its_front():
    x = torch.randn(40, 40, 40, 40, requires_grad=True)
    got = _toks(lambda t: t[:, [0, 1], :, [0, 1]], x, "backward")
    assert got.count("+10240000") == 2  # the zero gradient, and its copy with dims 1, 3 first
    copy = [i for i, t in enumerate(got) if t == "+10240000"][1]
    assert got[copy + 1 : copy + 6] == _seq("+16 +16 +16 +1 -1")


def test_index_by_broadcast_indices_copies_them():
    x = torch.randn(80, 80, 80)
    i = torch.randint(0, 80, (160, 1, 1))
    j = torch.randint(0, 80, (1, 160, 1))
    k = torch.randint(0, 80, (1, 1, 160))
    got = _toks(lambda t: t[i, j, k], x, "forward")
    assert got == _seq(
        "+32768000 +32768000 +32768000 +16384000 -32768000 -32768000 -32768000 -16384000"
    )


def test_embedding_bag_sizes_its_bags_before_its_output():
    weight = torch.randn(640, 320)
    ids = torch.randint(0, 640, (320, 320))
    got = _toks(F.embedding_bag, ids, "forward", weight, mode="sum")
    assert got == _seq("+2560 +2560 +819200 +409600 -819200 -2560 -2560 -409600")


def test_embedding_bag_backward_sorts_and_sums_partial_segments():
    weight = torch.randn(640, 320, requires_grad=True)
    ids = torch.randint(0, 640, (320, 320))
    got = _toks(F.embedding_bag, ids, "backward", weight, mode="sum")
    assert "+1678847" in got and "+13926400" in got  # cub's sort storage, the partial sums


def test_masked_index_put_accumulate_peaks_as_on_the_gpu():
    """Clamped indices, masked values, a clone, then the sort-based put, each broadcast
    index bounded over a contiguous copy of it (H100: a peak of 26,999,296 bytes)."""
    x = torch.randn(40, 40, 40)
    mask = torch.rand(80, 79, 81) < 0.5
    idx = [torch.randint(0, 40, s) for s in ((80, 1, 1), (1, 79, 1), (1, 1, 81))]
    values = torch.randn(80, 79, 81)
    got = trace_case(
        _Op(torch.ops.aten._unsafe_masked_index_put_accumulate),
        SampleInput(x, args=(mask, idx, values)),
        "forward",
    )
    assert got["peak_allocated"] == 26_999_296
    bound = _seq("+8 +4095360 +504 +4 -4 -504 -4095360 +1 -1 -8")
    signed = [f"{s}{n}" for s, n in tokens(got["events"])]
    assert signed[7:17] == bound
    # the clamped indices go first to last, as the C++ vector holding them
    assert signed[-4:] == _seq("-640 -632 -648 -256000")


def test_unique_values_keep_the_input_sized_storage():
    """CUDA writes the distinct values into an input-sized buffer and resizes it to their
    count, keeping the storage (H100: 2,048,000 bytes for 512,000 float32 of few values)."""
    x = torch.randint(0, 4, (512_000,)).float()
    assert _toks(torch.unique, x, "forward") == _seq("+2048000 -2048000")
    assert _toks(torch.unique_consecutive, x, "forward") == _seq("+2048000 -2048000")


def test_nonzero_storage_by_its_parts():
    from memfit.trace._nonzero import _reduce_storage
    from memfit.trace._scratch import select_storage as _select_storage

    assert _reduce_storage(64_000, 132) == _reduce_storage(262_144_000, 132) == 21_503
    assert _reduce_storage(16, 132) == 1  # one tile: cub asks for a byte
    assert [_select_storage(n) for n in (16, 64_000, 409_600, 512_000)] == [1023, 1023, 1791, 1791]
    assert _select_storage(262_144_000) == 497_407
    # the embedding backward's unique-by-key pass: 16-byte tile states
    assert [_select_storage(n, 16) for n in (4096, 16_384, 102_400, 262_144)] == [
        1279, 1279, 1535, 2047,
    ]  # fmt: skip


def test_nonzero_counts_then_selects_around_its_output():
    # H100: the count, cub's reduce storage, the output (here none: no nonzero element), cub's
    # select storage, the count freed last
    x = torch.zeros(250, 256)
    assert _toks(torch.nonzero, x, "forward") == _seq("+4 +21503 -21503 +1023 -1023 -4")


def test_masked_select_of_a_known_mask_sizes_nonzero_and_the_values():
    mask = torch.zeros(640, 640, dtype=torch.bool)
    mask[::2, ::4] = True  # 51,200 selected
    x = torch.randn(640, 640)
    got = _toks(torch.masked_select, x, "forward", mask)
    n = 51_200
    assert got == _seq(f"+4 +21503 -21503 +{16 * n} +1791 -1791 -4 +{4 * n} -{16 * n} -{4 * n}")


def test_masked_select_backward_scatters_into_its_zeros_in_place():
    mask = torch.zeros(640, 640, dtype=torch.bool)
    mask[::2, ::4] = True
    x = torch.randn(640, 640, requires_grad=True)
    got = _toks(torch.masked_select, x, "backward", mask)
    size = 640 * 640 * 4
    assert got.count(f"+{size}") == 1  # the gradient, written by masked_scatter_, no clone


def test_masked_fill_with_a_tensor_value_sums_the_selected_gradient():
    # the value's gradient: grad.masked_select(mask).sum() on the GPU, no gradient-sized where
    mask = torch.zeros(640, 640, dtype=torch.bool)
    mask[::2, ::4] = True
    x = torch.randn(640, 640, requires_grad=True)
    value = torch.tensor(1.5, requires_grad=True)
    got = _toks(torch.masked_fill, x, "backward", mask, value)
    size = 640 * 640 * 4
    assert got.count(f"+{size}") == 3  # output, incoming gradient, input's gradient
    assert f"+{51_200 * 4}" in got


def test_embedding_backward_finds_its_segments_with_cub_storage_freed_first():
    # H100: ... unique keys, cub's unique-by-key storage, freed before the keys (last first)
    weight = torch.randn(640, 320, requires_grad=True)
    idx = torch.randint(0, 640, (102_400,))
    got = trace_case(
        _Op(lambda i, w: F.embedding(i, w)), SampleInput(idx, args=(weight,)), "backward"
    )
    toks = [f"{sign}{size}" for sign, size in tokens(got["events"])]
    keys = 102_400 * 8
    at = toks.index("+1535")
    assert toks[at - 1 : at + 3] == [f"+{keys}", "+1535", "-1535", f"-{keys}"]


def test_indexing_with_python_lists_makes_its_index_tensors_on_the_gpu():
    # x[[0, 2], [1, 3]]: two int64 index tensors of two, made in C++ below the trace, before
    # the output; kept for the backward (H100: +16 +16 before the output)
    x = torch.randn(640, 640)
    assert _toks(lambda t: t[[0, 2], [1, 3]], x, "forward") == _seq("+16 +16 +8 -16 -16 -8")


def test_searchsorted_with_a_sorter_bounds_it_before_its_output():
    # H100, torch 2.11: sorter.aminmax() (two int64 scalars, the reduction's scratch), freed
    # before the int64 output; without a sorter, the output alone
    seq = torch.randn(512_000).sort().values
    values = torch.randn(512_000)
    sorter = torch.arange(512_000)
    got = _toks(torch.searchsorted, seq, "forward", values, sorter=sorter)
    assert got == _seq("+8 +8 +1008 +4 -4 -1008 -8 -8 +4096000 -4096000")
    assert _toks(torch.searchsorted, seq, "forward", values) == _seq("+4096000 -4096000")


def test_masked_index_lets_go_of_its_clamped_indices_first_to_last():
    # H100 op sweep, torch 2.11: the clamped indices (a C++ vector) go first to last, after
    # the gathered values
    x = torch.randn(40, 40, 40)
    mask = torch.rand(80, 79, 81) < 0.5
    idx = [torch.randint(0, 40, s) for s in ((80, 1, 1), (1, 79, 1), (1, 1, 81))]
    got = trace_case(
        _Op(torch.ops.aten._unsafe_masked_index), SampleInput(x, args=(mask, idx, 0.0)), "forward"
    )
    signed = [f"{s}{n}" for s, n in tokens(got["events"])]
    assert signed[-5:] == _seq("-2047680 -640 -632 -648 -2047680")


def test_segment_reduce_sizes_its_offsets_or_lengths_after_its_output():
    # H100 op sweep, torch 2.11, 5 segments of 512,000 float32: from lengths an 8-byte scalar,
    # the 48-byte offsets (held to the end) and cub's scan of them; from offsets, the lengths
    data = torch.randn(5, 102_400)
    lengths = torch.tensor([1, 1, 1, 1, 1])
    got = _toks(torch.segment_reduce, data, "forward", "sum", lengths=lengths)
    assert got == _seq("+2048000 +8 +48 -8 +1279 -1279 -48 -2048000")
    offsets = torch.tensor([0, 1, 2, 3, 4, 5])
    got = _toks(torch.segment_reduce, data, "forward", "sum", offsets=offsets)
    assert got == _seq("+2048000 +40 -40 -2048000")
