"""timm's ViT-S/16 compiled with ``torch.compile`` and trained on 224 x 224 images:
``compiled_vit.py:make_model`` (held out)."""

from __future__ import annotations

import timm
import torch
from torch import nn


def make_model() -> nn.Module:
    model = timm.create_model("vit_small_patch16_224", pretrained=False, num_classes=1000)
    return torch.compile(model)  # type: ignore[return-value]


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(batch_size, 3, 224, 224), torch.randint(0, 1000, (batch_size,))


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    images, labels = batch
    return nn.functional.cross_entropy(model(images), labels)
