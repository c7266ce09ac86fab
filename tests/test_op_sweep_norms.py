"""Group norm and RMS norm traced as the op sweep traces them (``benchmarks/op_sweep_sides``),
against the allocations and frees an H100 made for the same calls (torch 2.11,
benchmarks/results/2026-12-06-h100-op-sweep)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from tests.op_sweep_support import Op as _Op
from tests.op_sweep_support import SampleInput, tokens, trace_case


def test_group_norm_scale_shift_and_backward_scratch():
    # 80 samples x 80 channels x 80 elements, one group, with weight and bias: forward takes a
    # float32 scale and shift per (sample, channel); backward ds, db, c2, c3 and c1, freed
    # c3, c2, c1, then db and ds
    x = torch.randn(80, 80, 80, requires_grad=True)
    w, b = torch.randn(80, requires_grad=True), torch.randn(80, requires_grad=True)
    sample = SampleInput(x, args=(1,), kwargs={"weight": w, "bias": b, "eps": 0.5})
    got = trace_case(_Op(F.group_norm), sample, "backward")
    signed = [size if sign == "+" else -size for sign, size in tokens(got["events"])]
    out, nc, ng = 80 * 80 * 80 * 4, 80 * 80 * 4, 80 * 4
    assert signed == [
        out, ng, ng, nc, nc, -nc, -nc, out, out, 320, 320, nc, nc, ng, ng, nc, -ng, -ng, -nc,
        -nc, -nc, -ng, -ng, -out, -out, -320, -320, -out,
    ]  # fmt: skip


def _rms_norm_signed(dtype: torch.dtype, direction: str) -> list[int]:
    x = torch.randn(2, 6, dtype=dtype, requires_grad=True)
    w = torch.randn(6, dtype=dtype, requires_grad=True)
    got = trace_case(_Op(F.rms_norm), SampleInput(x, args=((6,), w, 1e-5)), direction)
    return [size if sign == "+" else -size for sign, size in tokens(got["events"])]


def test_rms_norm_is_one_fused_kernel_forward_and_backward():
    # CUDA's _fused_rms_norm: the output and a float32 rstd a row, kept for backward; its
    # backward allocates the input's and the weight's gradients (after the incoming one)
    assert _rms_norm_signed(torch.bfloat16, "forward") == [24, 8, -8, -24]
    assert _rms_norm_signed(torch.bfloat16, "backward") == [
        24,
        8,
        24,
        24,
        12,
        -8,
        -24,
        -24,
        -12,
        -24,
    ]
    assert _rms_norm_signed(torch.float32, "backward") == [
        48,
        8,
        48,
        48,
        24,
        -8,
        -48,
        -48,
        -24,
        -48,
    ]


def test_rms_norm_gradient_under_create_graph_is_differentiable():
    # the fused backward has no derivative: a double backward takes the composite's gradient
    from memfit.trace._rms_norm import _FusedRmsNorm

    x = torch.randn(3, 5, device="meta", requires_grad=True)
    w = torch.randn(5, device="meta", requires_grad=True)
    gx, gw = torch.autograd.grad(
        _FusedRmsNorm.apply(x, w, [5], 1e-6).sum(), (x, w), create_graph=True
    )
    (ggx,) = torch.autograd.grad((gx.sum() + gw.sum()), (x,))
    assert gx.shape == x.shape and gw.shape == w.shape and ggx.shape == x.shape


def test_rms_norm_with_a_weight_of_another_dtype_runs_the_composite():
    # ATen's rms_norm takes its composite then (and warns): left to the trace as it is
    x = torch.randn(2, 6, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(6, requires_grad=True)
    got = trace_case(_Op(F.rms_norm), SampleInput(x, args=((6,), w, 1e-5)), "forward")
    assert len(tokens(got["events"])) > 4


def test_rms_norm_of_a_transposed_input_copies_it_contiguous_first():
    # H100 zoo (timm's AIMv2-L inference, bf16, batch 1024): the patch embedding, transposed
    # to (B, N, C), is copied contiguous before the output and rstd, and freed after them
    x = torch.randn(4, 64, 32).transpose(1, 2)  # (4, 32, 64), not contiguous
    w = torch.randn(64)
    with torch.no_grad():
        got = trace_case(_Op(F.rms_norm), SampleInput(x, args=((64,), w, 1e-6)), "forward")
    events = got["events"]
    assert [(e[0], e[2]) for e in events[:3]] == [("a", 32768), ("a", 32768), ("a", 512)]
    assert events[3][:2] == ["f", events[0][1]]  # the copy, freed once the kernel ends
