"""A spatial transformer network, as user code: ``spatial_transformer.py:make_model``.

A small localisation network predicts an affine transform per image; ``affine_grid`` and
``grid_sample`` warp the image, and a convolutional classifier reads the warped image.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SIZE = 128
CLASSES = 100


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU())


class STN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.localise = nn.Sequential(
            _block(3, 16),
            nn.MaxPool2d(2),
            _block(16, 32),
            nn.MaxPool2d(2),
            nn.AdaptiveAvgPool2d(4),
            nn.Flatten(),
            nn.Linear(32 * 16, 64),
            nn.ReLU(),
            nn.Linear(64, 6),
        )
        nn.init.zeros_(self.localise[-1].weight)
        with torch.no_grad():
            self.localise[-1].bias.copy_(torch.tensor([1.0, 0, 0, 0, 1.0, 0]))
        self.classify = nn.Sequential(
            _block(3, 64),
            _block(64, 64),
            nn.MaxPool2d(2),
            _block(64, 128),
            nn.MaxPool2d(2),
            _block(128, 256),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(256, CLASSES),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        theta = self.localise(x).view(-1, 2, 3)
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        return self.classify(F.grid_sample(x, grid, align_corners=False))


def make_model() -> nn.Module:
    return STN()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(batch_size, 3, SIZE, SIZE), torch.randint(0, CLASSES, (batch_size,))


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y)
