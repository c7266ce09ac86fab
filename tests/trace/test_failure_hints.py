"""The custom-kernel hint of a failed trace appears only where it applies.

It applies to an op outside torch that has no fake (meta) kernel. It does not apply to an op that
has one and failed for another reason, nor to a failure whose exception is not the one an op
raised: a model that caught an op's failure and then failed for a reason of its own is not
reported as that op's failure. Each model is one small layer.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from memfit import TraceError, estimate

HINT = "custom CUDA extension"


@torch.library.custom_op("memfit_hints::no_fake", mutates_args=())
def no_fake(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@torch.library.custom_op("memfit_hints::strict_fake", mutates_args=())
def strict_fake(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@strict_fake.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    if x.shape[-1] != 16:
        raise ValueError(f"strict_fake takes 16 features, got {x.shape[-1]}")
    return torch.empty_like(x)


class Base(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)


class NoFake(Base):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return no_fake(self.proj(x))


class StrictFake(Base):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return strict_fake(self.proj(x))


class CaughtThenFailed(Base):
    """Falls back when the custom op fails, then calls interpolate without a size."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        try:
            y = no_fake(self.proj(x))
        except Exception:
            y = self.proj(x)
        return F.interpolate(y[None], size=None, scale_factor=None)  # raises in torch


def _x() -> torch.Tensor:
    return torch.randn(4, 8)


def test_an_op_without_a_fake_kernel_gets_the_hint():
    with pytest.raises(
        TraceError, match=r"memfit has no shape for memfit_hints::no_fake, called in NoFake's"
    ) as info:
        estimate(NoFake, _x)
    assert str(info.value).count(HINT) == 1


class Dirichlet(Base):
    """Samples from a Dirichlet distribution: an op with no meta kernel in torch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch._sample_dirichlet(self.proj(x).exp())


class FractionalPool(Base):
    """A 3-d fractional max pool over a (4, 4, 4) volume: its backward has no meta kernel in
    torch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cube = self.proj(x).reshape(1, 2, 4, 2, 2).repeat(1, 1, 1, 2, 2)
        return F.fractional_max_pool3d(cube, 2, output_size=1).sum()


def test_a_torch_op_without_a_meta_kernel_is_refused_by_name_model_and_phase():
    with pytest.raises(TraceError) as info:
        estimate(Dirichlet, _x)
    text = str(info.value)
    assert text.startswith(
        "memfit has no shape for aten::_sample_dirichlet, called in Dirichlet's forward of "
        "step 1 (called from "
    )
    assert 'torch.library.register_fake("aten::_sample_dirichlet")' in text
    assert "\n" not in text and "custom_ops_landing_page" not in text  # not torch's words
    assert info.value.op == "aten::_sample_dirichlet"


def test_an_op_without_a_meta_kernel_in_backward_is_refused_in_the_backward():
    with pytest.raises(TraceError) as info:
        estimate(FractionalPool, _x, loss_fn=lambda model, x: model(x))
    text = str(info.value)
    assert text.startswith(
        "memfit has no shape for aten::fractional_max_pool3d_backward, called in "
        "FractionalPool's backward of step 1"
    )
    assert "the op has no meta (fake) kernel" in text


def test_an_op_whose_fake_kernel_refuses_gets_no_hint():
    with pytest.raises(TraceError) as info:
        estimate(StrictFake, _x)
    text = str(info.value)
    assert "op memfit_hints::strict_fake in StrictFake failed during step1.forward" in text
    assert "strict_fake takes 16 features, got 8" in text
    assert HINT not in text and "register_fake" not in text


def test_a_caught_op_failure_is_not_blamed_for_a_later_error():
    with pytest.raises(TraceError) as info:
        estimate(CaughtThenFailed, _x)
    text = str(info.value)
    assert "either size or scale_factor should be defined" in text
    assert "during step1.forward" in text
    assert "no_fake" not in text and HINT not in text
