"""Convolutions of shapes no probe of memfit's package ran (odd channels and sizes), for the
GPU test of ``memfit.probe_convolutions``: ``odd_convolutions.py:make_model``."""

from __future__ import annotations

import torch
from torch import nn


class OddConvolutions(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Conv2d(37, 53, 5, padding=2)
        self.second = nn.Conv2d(53, 29, 3, stride=2, padding=1)
        self.head = nn.Linear(29, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.second(torch.relu(self.first(x)))
        return self.head(y.mean((2, 3)))


def make_model() -> nn.Module:
    return OddConvolutions()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(batch_size, 37, 123, 117), torch.randint(0, 10, (batch_size,))


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return nn.functional.cross_entropy(model(x), y)
