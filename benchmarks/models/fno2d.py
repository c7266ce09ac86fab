"""A 2-d Fourier neural operator, as user code: ``benchmarks/models/fno2d.py:make_model``.

Each layer takes the real FFT of its input, multiplies the lowest modes by complex weights
(``einsum`` on ``cfloat`` tensors), transforms back, and adds a pointwise convolution.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

GRID = 128
DEFAULT_SEQ_LEN = GRID


class SpectralConv2d(nn.Module):
    def __init__(self, width: int, modes: int) -> None:
        super().__init__()
        scale = 1 / (width * width)
        self.modes = modes
        self.w1 = nn.Parameter(scale * torch.randn(width, width, modes, modes, dtype=torch.cfloat))
        self.w2 = nn.Parameter(scale * torch.randn(width, width, modes, modes, dtype=torch.cfloat))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        m = self.modes
        x_ft = torch.fft.rfft2(x)
        out = torch.zeros(b, c, h, w // 2 + 1, dtype=torch.cfloat, device=x.device)
        out[:, :, :m, :m] = torch.einsum("bixy,ioxy->boxy", x_ft[:, :, :m, :m], self.w1)
        out[:, :, -m:, :m] = torch.einsum("bixy,ioxy->boxy", x_ft[:, :, -m:, :m], self.w2)
        return torch.fft.irfft2(out, s=(h, w))


class FNO2d(nn.Module):
    def __init__(self, width: int = 64, modes: int = 16, layers: int = 4) -> None:
        super().__init__()
        self.lift = nn.Conv2d(3, width, 1)
        self.spectral = nn.ModuleList(SpectralConv2d(width, modes) for _ in range(layers))
        self.pointwise = nn.ModuleList(nn.Conv2d(width, width, 1) for _ in range(layers))
        self.project = nn.Sequential(nn.Conv2d(width, 128, 1), nn.GELU(), nn.Conv2d(128, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.lift(x)
        for spectral, pointwise in zip(self.spectral, self.pointwise, strict=True):
            x = F.gelu(spectral(x) + pointwise(x))
        return self.project(x)


def make_model() -> nn.Module:
    return FNO2d()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    n = seq_len or GRID
    return torch.randn(batch_size, 3, n, n), torch.randn(batch_size, 1, n, n)


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return F.mse_loss(model(x), y)
