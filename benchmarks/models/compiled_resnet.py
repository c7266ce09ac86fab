"""torchvision's ResNet-50 compiled with ``torch.compile`` and trained on 224 x 224 images:
``compiled_resnet.py:make_model`` (held out)."""

from __future__ import annotations

import torch
import torchvision
from torch import nn


def make_model() -> nn.Module:
    return torch.compile(torchvision.models.resnet50())  # type: ignore[return-value]


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(batch_size, 3, 224, 224), torch.randint(0, 1000, (batch_size,))


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    images, labels = batch
    return nn.functional.cross_entropy(model(images), labels)
