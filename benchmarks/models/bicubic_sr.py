"""A residual super-resolution network (x4), as user code: ``bicubic_sr.py:make_model``.

EDSR-style: a 96x96 low-resolution image goes through a 3x3 head convolution, 24 residual
blocks of two 3x3 convolutions with ReLU and a residual scale of 0.1, and a tail; every
convolution pads with ``padding_mode="replicate"`` (edge pixels repeated instead of zeros).
Upsampling by two sub-pixel stages (a convolution to 4x the channels and
``F.pixel_shuffle``), then the prediction is added to a bicubic upsampling of the input
(``F.interpolate(mode="bicubic", align_corners=False)``) so the network learns only the
residual detail. The high-resolution targets are 384x384; the inputs are made from them by
``F.interpolate`` (bicubic, ``antialias=True``). Loss: L1 plus a Sobel-gradient L1 term
(``F.conv2d`` with fixed kernels, grouped per channel, with reflect padding by ``F.pad``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SCALE = 4
LR_SIZE = 96
HR_SIZE = LR_SIZE * SCALE


def conv(cin: int, cout: int) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, padding=1, padding_mode="replicate")


class ResBlock(nn.Module):
    def __init__(self, width: int, scale: float = 0.1) -> None:
        super().__init__()
        self.body = nn.Sequential(conv(width, width), nn.ReLU(inplace=True), conv(width, width))
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) * self.scale


class EDSR(nn.Module):
    def __init__(self, width: int = 192, depth: int = 24) -> None:
        super().__init__()
        self.head = conv(3, width)
        self.body = nn.Sequential(*[ResBlock(width) for _ in range(depth)], conv(width, width))
        self.upsample = nn.Sequential(
            conv(width, 4 * width),
            nn.PixelShuffle(2),
            conv(width, 4 * width),
            nn.PixelShuffle(2),
            conv(width, 3),
        )

    def forward(self, lr: torch.Tensor) -> torch.Tensor:
        x = self.head(lr)
        x = x + self.body(x)
        base = F.interpolate(lr, scale_factor=SCALE, mode="bicubic", align_corners=False)
        return base + self.upsample(x)


def sobel(x: torch.Tensor) -> torch.Tensor:
    kx = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]], device=x.device)
    kernels = torch.stack([kx, kx.t()])[:, None].repeat(x.shape[1], 1, 1, 1).to(x.dtype)
    return F.conv2d(F.pad(x, (1, 1, 1, 1), mode="reflect"), kernels, groups=x.shape[1])


def make_model() -> nn.Module:
    return EDSR()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(10206)
    coarse = torch.rand(batch_size, 3, HR_SIZE // 8, HR_SIZE // 8, generator=gen)
    hr = F.interpolate(coarse, size=(HR_SIZE, HR_SIZE), mode="bilinear", align_corners=False)
    hr = (hr + 0.05 * torch.randn(hr.shape, generator=gen)).clamp(0, 1)
    lr = F.interpolate(hr, size=(LR_SIZE, LR_SIZE), mode="bicubic", antialias=True)
    return lr.clamp(0, 1), hr


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    lr, hr = batch
    sr = model(lr).float()
    return (sr - hr).abs().mean() + 0.1 * (sobel(sr) - sobel(hr)).abs().mean()
