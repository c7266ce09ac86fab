"""torch.utils.checkpoint, reentrant and not, on a hand-made model."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from memfit import Category, InvalidInputError, estimate


class Deep(nn.Module):
    def __init__(self, reentrant: bool | None) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512)) for _ in range(6)
        )
        self.reentrant = reentrant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            if self.reentrant is None:
                x = block(x)
            else:
                x = checkpoint(block, x, use_reentrant=self.reentrant)
        return x


def batch() -> torch.Tensor:
    return torch.randn(4096, 512, requires_grad=True)


@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpointing_keeps_fewer_activations(reentrant):
    plain = estimate(lambda: Deep(None), batch, optimizer="sgd")
    ckpt = estimate(lambda: Deep(reentrant), batch, optimizer="sgd")
    assert ckpt.by_category.get(Category.ACTIVATION, 0) < plain.by_category[Category.ACTIVATION]
    assert ckpt.peak_allocated < plain.peak_allocated


def test_api_rejects_unknown_precision_with_the_accepted_values():
    with pytest.raises(InvalidInputError, match=r"fp8.*Accepted: fp32, bf16"):
        estimate(lambda: Deep(None), batch, precision="fp8")


def test_api_rejects_unknown_optimizer():
    with pytest.raises(InvalidInputError, match="lion"):
        estimate(lambda: Deep(None), batch, optimizer="lion")


def test_hub_ids_of_catalog_models_resolve_offline():
    pytest.importorskip("transformers")
    from memfit.workload._models import resolve_model

    assert resolve_model("hf:meta-llama/Llama-2-7b-hf").name == "llama-2-7b-hf"
