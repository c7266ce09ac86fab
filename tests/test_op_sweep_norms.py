"""Group norm traced as the op sweep traces it (``benchmarks/op_sweep_sides``), against the
allocations and frees an H100 made for the same call (torch 2.11,
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
