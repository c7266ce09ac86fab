"""A point-voxel network segmenting lidar sweeps, as user code:
``voxel_point_seg.py:make_model``.

Each point keeps its own features; every block also pools them into a voxel grid and back.
The voxel of a point is found by ``floor`` of its scaled coordinates (clamped), flattened
with the sample's offset into one index over all grids of the batch; the point features
(after a per-point MLP) are pooled per voxel both by ``scatter_reduce`` with ``amax`` and by
a mean from ``index_add`` of the features and of ones (the counts), the two joined by a
linear layer and read back at every point by indexing. Blocks at voxel resolutions 48, 24
and 12; a per-point classifier over 20 classes, cross-entropy ignoring unlabeled points.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

POINTS = 32768
FEATURES = 4  # xyz and intensity
CLASSES = 20
IGNORE = -100


class PointVoxelBlock(nn.Module):
    def __init__(self, dim: int, resolution: int) -> None:
        super().__init__()
        self.resolution = resolution
        self.point = nn.Sequential(nn.Linear(dim, dim), nn.LayerNorm(dim), nn.ReLU())
        self.voxel = nn.Sequential(nn.Linear(2 * dim, dim), nn.ReLU())
        self.out = nn.Sequential(nn.Linear(2 * dim, dim), nn.LayerNorm(dim))

    def forward(self, feats: torch.Tensor, coords: torch.Tensor) -> torch.Tensor:
        b, n, c = feats.shape
        r = self.resolution
        cell = (coords * r).floor().long().clamp_(0, r - 1)
        flat = (cell[..., 0] * r + cell[..., 1]) * r + cell[..., 2]
        flat = (flat + torch.arange(b, device=feats.device)[:, None] * r**3).reshape(-1)
        h = self.point(feats).reshape(-1, c)
        cells = b * r**3
        biggest = h.new_zeros(cells, c).scatter_reduce(
            0, flat[:, None].expand(-1, c), h, reduce="amax", include_self=False
        )
        sums = h.new_zeros(cells, c).index_add(0, flat, h)
        counts = h.new_zeros(cells).index_add(0, flat, torch.ones_like(flat, dtype=h.dtype))
        mean = sums / counts.clamp(min=1)[:, None]
        voxels = self.voxel(torch.cat([biggest, mean], -1))
        back = voxels[flat]
        return feats + self.out(torch.cat([h, back], -1)).view(b, n, c)


class PointVoxelNet(nn.Module):
    def __init__(self, dim: int = 128, resolutions: tuple[int, ...] = (48, 48, 24, 24, 12)):
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(FEATURES, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.blocks = nn.ModuleList(PointVoxelBlock(dim, r) for r in resolutions)
        self.head = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, CLASSES))

    def forward(self, points: torch.Tensor) -> torch.Tensor:
        xyz = points[..., :3]
        lo = xyz.amin(1, keepdim=True)
        hi = xyz.amax(1, keepdim=True)
        coords = (xyz - lo) / (hi - lo).clamp(min=1e-6)
        x = self.embed(points)
        for block in self.blocks:
            x = block(x, coords)
        return self.head(x)


def make_model() -> nn.Module:
    return PointVoxelNet()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    n = seq_len or POINTS
    points = torch.randn(batch_size, n, FEATURES)
    labels = torch.randint(0, CLASSES, (batch_size, n))
    labels[torch.rand(batch_size, n) < 0.1] = IGNORE
    return points, labels


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    points, labels = batch
    logits = model(points)
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE)
