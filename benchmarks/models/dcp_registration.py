"""Deep Closest Point: learned point cloud registration, as user code:
``dcp_registration.py:make_model``.

Two clouds of 1,024 points (the second a rotated, translated and jittered copy of the
first) are embedded by a shared PointNet (1x1 ``nn.Conv1d`` with batch norm). A transformer
of self-attention and cross-attention layers between the two clouds
(``nn.MultiheadAttention``) adds to each embedding what the other cloud tells it. Soft
correspondences are a softmax over scaled dot products of the embeddings; each source point
gets a matched point as the probability-weighted average of the target cloud. The rigid
transform is then solved in closed form, differentiably: the cross-covariance of the
centred point sets (3x3 per cloud), ``torch.linalg.svd``, and a reflection correction from
``torch.linalg.det`` on the diagonal, giving R = V diag(1, 1, d) U^T and t. Loss: the
distance of R^T R_true from the identity and of t from the true translation. The true
rotations are ``torch.linalg.matrix_exp`` of random skew-symmetric matrices.
"""

from __future__ import annotations

import itertools

import torch
from torch import nn

POINTS = 1024


class CrossBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.self_attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.cross_attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.ReLU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.self_attn(h, h, h, need_weights=False)[0]
        h = self.norm2(x)
        x = x + self.cross_attn(h, other, other, need_weights=False)[0]
        return x + self.mlp(self.norm3(x))


class DCP(nn.Module):
    def __init__(self, dim: int = 512, depth: int = 4, heads: int = 8) -> None:
        super().__init__()
        chans = [3, 64, 64, 128, 256, dim]
        layers: list[nn.Module] = []
        for cin, cout in itertools.pairwise(chans):
            layers += [nn.Conv1d(cin, cout, 1, bias=False), nn.BatchNorm1d(cout), nn.ReLU()]
        self.pointnet = nn.Sequential(*layers)
        self.blocks = nn.ModuleList(CrossBlock(dim, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)

    def embed(self, src: torch.Tensor, tgt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = self.pointnet(src.transpose(1, 2)).transpose(1, 2)
        b = self.pointnet(tgt.transpose(1, 2)).transpose(1, 2)
        for block in self.blocks:
            a, b = block(a, b), block(b, a)
        return self.norm(a), self.norm(b)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = self.embed(src, tgt)
        scores = a @ b.transpose(1, 2) / a.shape[-1] ** 0.5
        matched = scores.float().softmax(-1) @ tgt  # (batch, points, 3)
        src_mean, matched_mean = src.mean(1, keepdim=True), matched.mean(1, keepdim=True)
        cov = (src - src_mean).transpose(1, 2) @ (matched - matched_mean)
        u, _, vh = torch.linalg.svd(cov)
        v = vh.transpose(1, 2)
        d = torch.linalg.det(v @ u.transpose(1, 2))
        diag = torch.ones(src.shape[0], 3, device=src.device, dtype=src.dtype)
        diag = torch.cat([diag[:, :2], d[:, None]], 1)
        rotation = v @ torch.diag_embed(diag) @ u.transpose(1, 2)
        translation = matched_mean[:, 0] - (rotation @ src_mean.transpose(1, 2))[..., 0]
        return rotation, translation


def make_model() -> nn.Module:
    return DCP()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(8206)
    src = torch.rand(batch_size, POINTS, 3, generator=gen) * 2 - 1
    w = torch.randn(batch_size, 3, generator=gen) * 0.8
    zero = torch.zeros(batch_size)
    skew = torch.stack(
        [zero, -w[:, 2], w[:, 1], w[:, 2], zero, -w[:, 0], -w[:, 1], w[:, 0], zero], 1
    ).view(batch_size, 3, 3)
    rotation = torch.linalg.matrix_exp(skew)
    translation = torch.rand(batch_size, 3, generator=gen) - 0.5
    tgt = src @ rotation.transpose(1, 2) + translation[:, None]
    tgt = tgt + 0.01 * torch.randn(tgt.shape, generator=gen)
    perm = torch.randperm(POINTS, generator=gen)
    return src, tgt[:, perm], rotation, translation


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    src, tgt, rotation, translation = batch
    pred_r, pred_t = model(src, tgt)
    eye = torch.eye(3, device=src.device)
    rot_err = (pred_r.transpose(1, 2) @ rotation - eye).pow(2).sum((1, 2)).mean()
    return rot_err + (pred_t - translation).pow(2).sum(1).mean()
