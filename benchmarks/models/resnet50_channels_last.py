"""ResNet-50 in channels-last memory format, as user code: ``resnet50_channels_last.py``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
import torchvision
from torch import nn


def make_model() -> nn.Module:
    return torchvision.models.resnet50().to(memory_format=torch.channels_last)


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    images = torch.randn(batch_size, 3, 224, 224).contiguous(memory_format=torch.channels_last)
    return images, torch.randint(0, 1000, (batch_size,))


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    images, targets = batch
    return F.cross_entropy(model(images), targets)
