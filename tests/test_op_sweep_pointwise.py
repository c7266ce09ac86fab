"""Pointwise ops traced as the op sweep traces them (``benchmarks/op_sweep_sides``), against
the allocations and frees an H100 made for the same calls (torch 2.11,
benchmarks/results/2026-12-06-h100-op-sweep)."""

from __future__ import annotations

import torch
from tests.op_sweep_support import Op as _Op
from tests.op_sweep_support import SampleInput, tokens, trace_case


def test_a_zero_gradient_takes_no_memory():
    # sgn's gradient for a real input is an efficient zero tensor, which CUDA backs with no
    # memory: the output and the incoming gradient are the call's only allocations
    x = torch.randn(640, 640, requires_grad=True)
    got = trace_case(_Op(torch.sgn), SampleInput(x), "backward")
    size = 640 * 640 * 4
    assert tokens(got["events"]) == [("+", size), ("+", size), ("-", size), ("-", size)]


def test_mish_backward_allocates_the_input_gradient_alone():
    # CUDA's fused mish_backward: the output, the incoming gradient and the input's gradient
    x = torch.randn(640, 512, requires_grad=True)
    got = trace_case(_Op(torch.nn.functional.mish), SampleInput(x), "backward")
    size = 640 * 512 * 4
    assert tokens(got["events"]) == [("+", size)] * 3 + [("-", size)] * 3


def test_mish_backward_under_create_graph_is_the_real_gradient():
    from memfit.trace._mish import _Mish

    x = torch.randn(7, dtype=torch.float64, requires_grad=True)
    (got,) = torch.autograd.grad(_Mish.apply(x).sum(), x, create_graph=True)
    (want,) = torch.autograd.grad(torch.nn.functional.mish(x).sum(), x, create_graph=True)
    assert torch.allclose(got, want)


def test_ldexp_runs_as_a_power_of_two_times_the_input():
    # ldexp has no CUDA kernel: its composite makes pow(2, other) (with the base as an
    # 8-byte tensor on the GPU for the call), then the product
    x, other = torch.randn(80, 160, 80), torch.randn(80, 160, 80)
    got = trace_case(_Op(torch.ldexp), SampleInput(x, args=(other,)), "forward")
    size = 80 * 160 * 80 * 4
    assert tokens(got["events"]) == [
        ("+", size), ("+", 8), ("-", 8), ("+", size), ("-", size), ("-", size),
    ]  # fmt: skip


def _signed(fn, *args, direction: str = "forward", **kwargs) -> list[int]:
    got = trace_case(_Op(fn), SampleInput(args[0], args=args[1:], kwargs=kwargs), direction)
    return [size if sign == "+" else -size for sign, size in tokens(got["events"])]


def test_normal_with_a_tensor_std_checks_it_before_and_after_its_output():
    # std.min().ge(0).item() twice (4 bytes and a bool each time), around the 120-byte output
    mean, std = torch.randn(30), torch.rand(30)
    assert _signed(torch.normal, mean, std) == [4, 1, -1, -4, 120, 4, 1, -1, -4, -120]


def test_normal_with_a_float_std_makes_an_output_sized_tensor_it_never_uses():
    assert _signed(torch.normal, torch.randn(12), 0.5) == [48, 48, -48, -48]


def test_bernoulli_of_bfloat16_probabilities_samples_from_a_float_copy():
    p = torch.rand(24, dtype=torch.bfloat16)
    assert _signed(torch.bernoulli, p) == [48, 96, -96, -48]
    assert _signed(torch.bernoulli, torch.rand(24)) == [96, -96]


def test_safe_softmax_finds_its_all_masked_rows_with_temporaries():
    # the softmax, a boolean of the input's -inf, one per row (all) and a scalar zero
    x = torch.randn(5, 5)
    got = _signed(torch.ops.aten._safe_softmax.default, x, -1)
    assert got == [100, 25, 5, 4, -4, -5, -25, -100]


def test_bilinear_runs_a_bmm_pair_per_output_feature():
    x1, x2, w = torch.randn(8, 4), torch.randn(8, 4), torch.randn(3, 4, 4)
    got = _signed(torch.nn.functional.bilinear, x1, x2, w)
    # the zeroed output, then for each of the 3 features a pair alloc, alloc, free, free (the
    # H100's pattern: [8, 8] outputs made of 8 pairs of 256 and 32 bytes), then the output
    pair = got[1:5]
    assert got == [96, *pair * 3, -96]
    assert pair[0] > 0 and pair[1] > 0 and pair[2:] == [-pair[0], -pair[1]]


def test_two_gradients_of_one_input_from_one_node_are_summed_in_place():
    # d * d returns both gradients to d's node: the engine adds the second into the first in
    # place (H100 op sweep: masked.var's squared difference); x.sin() * x.cos() sends its two
    # to x's accumulator from one node too, while sin + cos's two come from two nodes
    def square(t):
        d = t * 2
        return d * d

    sin_cos = (lambda t: t.sin() * t.cos(), lambda t: t.sin() + t.cos())
    for fn, forward_adds in ((square, 0), (sin_cos[0], 0), (sin_cos[1], 1)):
        x = torch.randn(64_000, requires_grad=True)
        got = trace_case(_Op(fn), SampleInput(x), "backward")
        adds = [e for e in got["events"] if e[0] == "a" and e[3].startswith("add:")]
        assert len(adds) == forward_adds


def test_chunk_cat_packs_its_metadata_after_its_output():
    # cuda/TensorShape.cu: 8 bytes x (6 per input + 2 + a block per 2,048 padded chunk bytes):
    # two inputs of one block each, 128 bytes (H100 op sweep: 304 and 296 for five inputs)
    tensors = [torch.randn(2, 1000), torch.randn(2, 10)]
    got = trace_case(_Op(torch._chunk_cat), SampleInput(tensors, args=(1, 2)), "forward")
    signed = [size if sign == "+" else -size for sign, size in tokens(got["events"])]
    assert signed == [8080, 128, -128, -8080]
    # an input that is not dense takes the composite: no metadata
    from memfit.trace._scratch import chunk_cat_metadata

    gapped = torch.empty(2, 2000, device="meta")[:, ::2]
    assert chunk_cat_metadata(([gapped, torch.empty(2, 10, device="meta")], 1, 2)) == []
    assert chunk_cat_metadata(([gapped.contiguous(), torch.empty(2, 10, device="meta")], 1, 2))


def test_max_pool_of_a_window_cut_from_a_larger_tensor_copies_it_after_its_outputs():
    # H100 zoo (timm's Hiera, bf16 inference): the pooled queries are a third of qkv, neither
    # contiguous nor channels-last; CUDA pools a contiguous copy (channels-last, as their
    # strides suggest), made after the output and indices and freed when the kernel ends
    from memfit.trace._kernels import _pool_input_copy

    qkv = torch.empty(49, 8, 8, 3 * 192, dtype=torch.bfloat16, device="meta")
    q = qkv[..., :192].permute(0, 3, 1, 2)  # (49, 192, 8, 8), strides (36864, 1, 4608, 576)
    assert _pool_input_copy(q) == [(49 * 192 * 64 * 2, "max pool input made contiguous")]
    assert _pool_input_copy(q.contiguous(memory_format=torch.channels_last)) == []
    assert _pool_input_copy(q.contiguous()) == []
