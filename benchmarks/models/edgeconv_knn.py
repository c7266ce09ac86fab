"""A point-cloud network with k-nearest-neighbour edge convolutions (DGCNN-style), as user
code: ``edgeconv_knn.py:make_model``. Neighbours from ``cdist`` and ``topk``, gathered by
advanced indexing; edge features through 1x1 convolutions, max over the neighbours."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

POINTS = 1024
K = 20
CLASSES = 40


def knn_features(x: torch.Tensor, k: int) -> torch.Tensor:
    """(B, C, N) -> (B, 2C, N, k): each point's neighbours' offsets and the point itself."""
    pts = x.transpose(1, 2)  # (B, N, C)
    idx = torch.cdist(pts, pts).topk(k, dim=-1, largest=False).indices  # (B, N, k)
    batch = torch.arange(x.shape[0], device=x.device)[:, None, None]
    neighbours = pts[batch, idx]  # (B, N, k, C)
    centre = pts.unsqueeze(2).expand_as(neighbours)
    return torch.cat([neighbours - centre, centre], -1).permute(0, 3, 1, 2)


class EdgeConv(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(2 * cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.LeakyReLU(0.2)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(knn_features(x, K)).amax(-1)


class DGCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.edges = nn.ModuleList([EdgeConv(3, 64), EdgeConv(64, 64), EdgeConv(64, 128)])
        self.fuse = nn.Sequential(
            nn.Conv1d(256, 512, 1, bias=False), nn.BatchNorm1d(512), nn.LeakyReLU(0.2)
        )
        self.head = nn.Sequential(
            nn.Linear(1024, 256), nn.ReLU(), nn.Dropout(0.5), nn.Linear(256, CLASSES)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = []
        for edge in self.edges:
            x = edge(x)
            feats.append(x)
        h = self.fuse(torch.cat(feats, 1))
        return self.head(torch.cat([h.amax(-1), h.mean(-1)], 1))


def make_model() -> nn.Module:
    return DGCNN()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(batch_size, 3, POINTS), torch.randint(0, CLASSES, (batch_size,))


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y)
