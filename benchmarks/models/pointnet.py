"""A PointNet classifier, as user code: ``pointnet.py:make_model``.

Shared per-point MLPs as 1x1 ``Conv1d`` with batch norm; two T-nets predict a 3x3 and a 64x64
transform (initialised to the identity) applied with ``torch.bmm``; a global feature from
``torch.max(x, dim)``; cross-entropy plus the orthogonality penalty ``|I - A A^T|^2`` on the
feature transform.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import nn

POINTS = 2048
CLASSES = 40


def _shared(*sizes: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in itertools.pairwise(sizes):
        layers += [nn.Conv1d(a, b, 1), nn.BatchNorm1d(b), nn.ReLU()]
    return nn.Sequential(*layers)


class TNet(nn.Module):
    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k
        self.features = _shared(k, 64, 128, 1024)
        self.regress = nn.Sequential(
            nn.Linear(1024, 512),
            nn.BatchNorm1d(512),
            nn.ReLU(),
            nn.Linear(512, 256),
            nn.BatchNorm1d(256),
            nn.ReLU(),
            nn.Linear(256, k * k),
        )
        nn.init.zeros_(self.regress[-1].weight)
        nn.init.zeros_(self.regress[-1].bias)
        self.register_buffer("eye", torch.eye(k).flatten(), False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = torch.max(self.features(x), 2)[0]
        return (self.regress(g) + self.eye).view(-1, self.k, self.k)


class PointNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.input_transform = TNet(3)
        self.mlp1 = _shared(3, 64, 64)
        self.feature_transform = TNet(64)
        self.mlp2 = _shared(64, 64, 128, 1024)
        self.head = nn.Sequential(
            nn.Linear(1024, 512),
            nn.BatchNorm1d(512),
            nn.ReLU(),
            nn.Linear(512, 256),
            nn.BatchNorm1d(256),
            nn.ReLU(),
            nn.Dropout(0.3),
            nn.Linear(256, CLASSES),
        )

    def forward(self, pts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, 3, N) points -> logits and the feature transform."""
        x = torch.bmm(self.input_transform(pts).transpose(1, 2), pts)
        x = self.mlp1(x)
        a = self.feature_transform(x)
        x = torch.bmm(a.transpose(1, 2), x)
        g, _ = torch.max(self.mlp2(x), dim=2)
        return self.head(g), a


def make_model() -> nn.Module:
    return PointNet()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    pts = F.normalize(torch.randn(batch_size, 3, POINTS), dim=1) * torch.rand(batch_size, 1, 1)
    return pts, torch.randint(0, CLASSES, (batch_size,))


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    pts, y = batch
    logits, a = model(pts)
    eye = torch.eye(a.shape[1], device=a.device)
    penalty = (eye - torch.bmm(a, a.transpose(1, 2))).pow(2).sum((1, 2)).mean()
    return F.cross_entropy(logits, y) + 0.001 * penalty
