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
