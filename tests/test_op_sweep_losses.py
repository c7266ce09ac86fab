"""Reduced losses traced as the op sweep traces them (``benchmarks/op_sweep_sides``), against
the allocations and frees an H100 made for the same calls (torch 2.11,
benchmarks/results/2026-12-06-h100-op-sweep): the unreduced loss CUDA writes before it
reduces, and the storage of that size some losses' scalar outputs keep."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import op_sweep_cases as cases
from op_sweep_compare import tokens
from op_sweep_sides import trace_case

cases.testing_importable()
from torch.testing._internal.opinfo.core import SampleInput  # noqa: E402

N = 80 * 80 * 80  # elements of each input


class _Op:
    def __init__(self, fn):
        self.fn = fn

    def __call__(self, x, *args, **kwargs):
        return self.fn(x, *args, **kwargs)


def _signed(fn, direction: str, dtype: torch.dtype = torch.float32, **kwargs) -> list[int]:
    x = torch.rand(80, 80, 80, dtype=dtype, requires_grad=True)
    y = torch.rand(80, 80, 80, dtype=dtype, requires_grad=True)
    got = trace_case(_Op(fn), SampleInput(x, args=(y,), kwargs=kwargs), direction)
    return [size if sign == "+" else -size for sign, size in tokens(got["events"])]


def test_mse_loss_keeps_a_full_size_output_through_backward():
    # the output made at the inputs' size and resized to a scalar, the unreduced loss, mean's
    # partial results and semaphores; the output's storage lives until the loss is freed
    assert _signed(F.mse_loss, "backward") == [
        4 * N, 4 * N, 252, 4, -4, -252, -4 * N, 4, 4 * N, 4 * N, -4 * N, -4, -4 * N, -4 * N,
    ]  # fmt: skip


def test_smooth_l1_loss_reduces_a_second_full_size_tensor():
    assert _signed(F.smooth_l1_loss, "forward") == [4 * N, 4 * N, 252, 4, -4, -252, -4 * N, -4 * N]


def test_huber_loss_makes_its_unreduced_loss_before_its_output():
    got = _signed(F.huber_loss, "forward", torch.bfloat16, reduction="mean", delta=8.7)
    assert got == [2 * N, 2, 252, 4, -4, -252, -2 * N, -2]


def test_binary_cross_entropy_reduces_into_a_scalar_and_keeps_its_output_storage():
    assert _signed(F.binary_cross_entropy, "forward") == [4 * N, 4, 252, 4, -4, -252, -4, -4 * N]


def test_multi_margin_loss_sums_a_per_row_loss_and_has_a_backward():
    # 1,280 rows of 640 classes: the scalar output, then a per-row loss summed into it; the
    # backward (no meta kernel) allocates the input's gradient alone
    x = torch.randn(1280, 640, requires_grad=True)
    target = torch.randint(0, 640, (1280,))
    sample = SampleInput(x, args=(target,), kwargs={"weight": None})
    got = trace_case(_Op(F.multi_margin_loss), sample, "backward")
    signed = [size if sign == "+" else -size for sign, size in tokens(got["events"])]
    assert signed == [4, 5120, -5120, 4, 1280 * 640 * 4, -4, -4, -1280 * 640 * 4]


def test_atan2_backward_zeroes_its_reciprocal_in_place():
    # atan2_backward's recip.masked_fill_(recip.isinf(), 0): the mask made and freed, no copy
    got = _signed(torch.atan2, "backward")
    at = got.index(N)
    assert got[at - 1 : at + 3] == [4 * N, N, -N, 4 * N]


def test_binary_cross_entropy_target_gradient_is_scaled_in_place():
    x = torch.rand(80, 80, 80, requires_grad=True)
    y = torch.rand(80, 80, 80, requires_grad=True)
    got = trace_case(_Op(F.binary_cross_entropy), SampleInput(x, args=(y,)), "backward")
    signed = [size if sign == "+" else -size for sign, size in tokens(got["events"])]
    # the loss's output and unreduced loss, then the input's gradient and the target's (logit,
    # negated and scaled in place): no third full-size tensor
    assert signed.count(4 * N) == 3


def test_a_full_max_backward_combines_its_nan_masks_in_place():
    # evenly_distribute_backward on CUDA: isnan(input), isnan(value), their logical_and in
    # place, then input == value: two input-sized booleans (H100 op sweep: 512,000 bytes each)
    x = torch.rand(80, 80, 80, requires_grad=True)
    got = trace_case(_Op(torch.max), SampleInput(x), "backward")
    masks = [size for sign, size in tokens(got["events"]) if sign == "+" and size == N]
    assert len(masks) == 2


def test_multilabel_margin_loss_sums_its_per_row_losses_into_its_output():
    # H100 op sweep, torch 2.11, 640 rows of 320 float32: is_target, the per-row losses, the
    # scalar output, then the per-row losses freed; unreduced, the per-row losses are the output
    x = torch.randn(640, 320)
    target = torch.randint(-1, 320, (640, 320))
    got = trace_case(_Op(F.multilabel_margin_loss), SampleInput(x, args=(target,)), "forward")
    signed = [size if sign == "+" else -size for sign, size in tokens(got["events"])]
    assert signed[:4] == [819200, 2560, 4, -2560]
    sample = SampleInput(x, args=(target,), kwargs={"reduction": "none"})
    got = trace_case(_Op(F.multilabel_margin_loss), sample, "forward")
    signed = [size if sign == "+" else -size for sign, size in tokens(got["events"])]
    assert signed[:2] == [819200, 2560] and 4 not in signed


def test_soft_margin_loss_backward_makes_its_exponential_then_its_gradient():
    # H100 op sweep, torch 2.11 (Loss.cpp): -target, -target * x and exp of it (the first two
    # freed at the statement's end), the gradient from target * z, z freed on return
    x = torch.randn(80, 80, 80, requires_grad=True)
    target = torch.randn(80, 80, 80).sign()
    got = trace_case(_Op(F.soft_margin_loss), SampleInput(x, args=(target,)), "backward")
    signed = [size if sign == "+" else -size for sign, size in tokens(got["events"])]
    assert signed[7:] == [  # from the loss's gradient (ones_like) on, as on the H100
        4, 4 * N, 4 * N, 4 * N, -4 * N, -4 * N, 4 * N, -4 * N, -4 * N, -4, -4 * N,
    ]  # fmt: skip
