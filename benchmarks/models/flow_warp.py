"""Unsupervised optical flow between two frames, as user code: ``flow_warp.py:make_model``.

A shared strided convolutional encoder gives both frames features at 1/8 resolution; an
all-pairs cost volume between them by ``einsum`` (every position of the first frame against
every position of the second), a softmax over it and the expected target coordinates (a
``meshgrid`` of pixel positions) give a coarse flow, refined per pixel by an MLP on the
channels-last features. The flow is upsampled by ``F.interpolate`` (bilinear) to full
resolution, turned into a normalised sampling grid and the second frame is warped onto the
first by ``F.grid_sample``. The loss is a Charbonnier photometric error plus an edge-aware
smoothness term on the flow (``torch.diff`` along both axes, weighted by ``exp`` of the
image gradients).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

HEIGHT, WIDTH = 256, 512
SCALE = 8


def pixel_grid(h: int, w: int, device: torch.device) -> torch.Tensor:
    """(h, w, 2) pixel coordinates, x first."""
    ys, xs = torch.meshgrid(
        torch.arange(h, device=device, dtype=torch.float32),
        torch.arange(w, device=device, dtype=torch.float32),
        indexing="ij",
    )
    return torch.stack([xs, ys], -1)


class FlowNet(nn.Module):
    def __init__(self, dim: int = 256) -> None:
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(3, 64, 7, stride=2, padding=3),
            nn.ReLU(inplace=True),
            nn.Conv2d(64, 128, 3, stride=2, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(128, dim, 3, stride=2, padding=1),
        )
        self.refine = nn.Sequential(
            nn.Linear(dim + 2, 256), nn.GELU(), nn.Linear(256, 128), nn.GELU(), nn.Linear(128, 2)
        )
        self.temperature = nn.Parameter(torch.tensor(dim**-0.5))

    def forward(self, img1: torch.Tensor, img2: torch.Tensor) -> torch.Tensor:
        f1, f2 = self.encoder(img1), self.encoder(img2)
        h, w = f1.shape[-2:]
        corr = torch.einsum("bchw,bcuv->bhwuv", f1, f2) * self.temperature
        prob = corr.flatten(3).float().softmax(-1)  # (b, h, w, h*w)
        grid = pixel_grid(h, w, img1.device)
        target = prob @ grid.view(-1, 2)  # expected coordinates, (b, h, w, 2)
        coarse = target - grid
        feats = f1.permute(0, 2, 3, 1)
        flow = coarse + self.refine(torch.cat([feats, coarse.to(feats.dtype)], -1)).float()
        flow = F.interpolate(
            flow.permute(0, 3, 1, 2), scale_factor=SCALE, mode="bilinear", align_corners=False
        )
        return flow * SCALE  # (b, 2, H, W) in pixels


def warp(img: torch.Tensor, flow: torch.Tensor) -> torch.Tensor:
    h, w = img.shape[-2:]
    coords = pixel_grid(h, w, img.device)[None] + flow.permute(0, 2, 3, 1)
    gx = 2 * coords[..., 0] / (w - 1) - 1
    gy = 2 * coords[..., 1] / (h - 1) - 1
    grid = torch.stack([gx, gy], -1)
    return F.grid_sample(img, grid, mode="bilinear", padding_mode="border", align_corners=True)


def make_model() -> nn.Module:
    return FlowNet()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    img1 = torch.rand(batch_size, 3, HEIGHT, WIDTH)
    img2 = torch.roll(img1, shifts=(3, -5), dims=(2, 3)) + 0.02 * torch.randn_like(img1)
    return img1, img2


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    img1, img2 = batch
    flow = model(img1, img2)
    warped = warp(img2, flow)
    photometric = ((img1 - warped).pow(2) + 1e-6).pow(0.45).mean()
    wx = torch.exp(-10 * torch.diff(img1, dim=3).abs().mean(1, keepdim=True))
    wy = torch.exp(-10 * torch.diff(img1, dim=2).abs().mean(1, keepdim=True))
    smooth = (wx * torch.diff(flow, dim=3).abs()).mean() + (
        wy * torch.diff(flow, dim=2).abs()
    ).mean()
    return photometric + 0.05 * smooth
