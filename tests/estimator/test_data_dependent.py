"""Models that look at values while tracing: masks checked with .all(), .item(), nonzero."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from memfit import TraceError, estimate


class MaskSkipper(nn.Module):
    """Takes the cheap branch when the mask is all ones, as transformers does."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(64, 64)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if mask.all():
            return self.proj(x)
        big = torch.ones(x.shape[0], 4096, 4096, device=x.device)  # the costly branch
        return self.proj(x) + big.sum()


def batch(all_ones: bool):
    mask = torch.ones(8, 16, dtype=torch.long)
    if not all_ones:
        mask[0, 0] = 0
    return {"x": torch.randn(8, 16, 64), "mask": mask}


def test_real_mask_values_decide_the_branch():
    cheap = estimate(MaskSkipper, lambda: batch(True), mode="infer")
    costly = estimate(MaskSkipper, lambda: batch(False), mode="infer")
    assert costly.peak_allocated - cheap.peak_allocated >= 8 * 4096 * 4096 * 4
    assert not any("no known value" in n for n in cheap.notes)


class ItemFromWeights(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()))
        self.proj = nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.scale.item() > 100:  # a value no trace can know
            x = x * 2
        return self.proj(x)


def test_unknown_scalars_are_answered_and_reported():
    est = estimate(ItemFromWeights, lambda: torch.randn(4, 64))
    assert any("item()" in n and "answered" in n for n in est.notes)


class Selector(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(64, 64)

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        rows = torch.nonzero(ids > 0).squeeze(-1)  # data-dependent size
        return self.proj(x[rows])


def test_nonzero_uses_the_real_ids():
    ids = torch.zeros(1000, dtype=torch.long)
    ids[:10] = 1
    few = estimate(Selector, lambda: (torch.randn(1000, 64), ids), mode="infer")
    many = estimate(
        Selector, lambda: (torch.randn(1000, 64), torch.ones(1000, dtype=torch.long)), mode="infer"
    )
    assert many.peak_allocated > few.peak_allocated


@torch.library.custom_op("memfit_test::cpu_only", mutates_args=())
def cpu_only(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


class UsesCustomOp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cpu_only(self.proj(x))


def test_an_op_without_a_meta_kernel_gets_a_clear_error():
    with pytest.raises(
        TraceError, match=r"memfit_test::cpu_only, called in UsesCustomOp's forward"
    ) as info:
        estimate(UsesCustomOp, lambda: torch.randn(2, 8), mode="infer")
    # the hint applies (a custom op); --debug is the CLI's to say, once, after the message
    assert "register_fake" in str(info.value)
    assert "--debug" not in str(info.value)
