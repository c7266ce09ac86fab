"""A diffusion U-Net that predicts the noise, as user code: ``unet_denoiser.py:make_model``.

Residual blocks with ``GroupNorm`` and SiLU, a sinusoidal timestep embedding added in every
block, strided convolutions down, ``F.interpolate`` (nearest) up, skips joined by
``torch.cat``; images noised on a cosine schedule, mean squared error on the noise.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

SIZE = 64
STEPS = 1000


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, device=t.device) / half)
    angles = t.float()[:, None] * freqs[None, :]
    return torch.cat([angles.sin(), angles.cos()], -1)


class ResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, tdim: int) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(32, cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.time = nn.Linear(tdim, cout)
        self.norm2 = nn.GroupNorm(32, cout)
        self.drop = nn.Dropout(0.1)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.time(F.silu(temb))[:, :, None, None]
        h = self.conv2(self.drop(F.silu(self.norm2(h))))
        return h + self.skip(x)


class UNet(nn.Module):
    def __init__(self, base: int = 128, mults: tuple[int, ...] = (1, 2, 2, 4)) -> None:
        super().__init__()
        self.base = base
        tdim = 4 * base
        self.time_mlp = nn.Sequential(nn.Linear(base, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
        self.stem = nn.Conv2d(3, base, 3, padding=1)
        chans = [base * m for m in mults]
        self.down = nn.ModuleList()
        self.downsample = nn.ModuleList()
        skips = [base]
        cin = base
        for i, c in enumerate(chans):
            self.down.append(nn.ModuleList([ResBlock(cin, c, tdim), ResBlock(c, c, tdim)]))
            cin = c
            skips += [c, c]
            last = i == len(chans) - 1
            self.downsample.append(nn.Identity() if last else nn.Conv2d(c, c, 3, 2, 1))
            if not last:
                skips.append(c)
        self.mid = nn.ModuleList([ResBlock(cin, cin, tdim), ResBlock(cin, cin, tdim)])
        self.up = nn.ModuleList()
        self.upconv = nn.ModuleList()
        for i, c in reversed(list(enumerate(chans))):
            blocks = nn.ModuleList()
            for _ in range(3):
                blocks.append(ResBlock(cin + skips.pop(), c, tdim))
                cin = c
            self.up.append(blocks)
            self.upconv.append(nn.Conv2d(c, c, 3, padding=1) if i > 0 else nn.Identity())
        self.out = nn.Sequential(nn.GroupNorm(32, cin), nn.SiLU(), nn.Conv2d(cin, 3, 3, padding=1))

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        temb = self.time_mlp(timestep_embedding(t, self.base))
        h = self.stem(x)
        hs = [h]
        for blocks, down in zip(self.down, self.downsample, strict=True):
            for block in blocks:
                h = block(h, temb)
                hs.append(h)
            if not isinstance(down, nn.Identity):
                h = down(h)
                hs.append(h)
        for block in self.mid:
            h = block(h, temb)
        for blocks, upconv in zip(self.up, self.upconv, strict=True):
            for block in blocks:
                h = block(torch.cat([h, hs.pop()], 1), temb)
            if not isinstance(upconv, nn.Identity):
                h = upconv(F.interpolate(h, scale_factor=2, mode="nearest"))
        return self.out(h)


def make_model() -> nn.Module:
    return UNet()


def make_batch(batch_size: int, seq_len: int | None) -> dict[str, torch.Tensor]:
    return {
        "images": torch.randn(batch_size, 3, SIZE, SIZE).clamp(-1, 1),
        "noise": torch.randn(batch_size, 3, SIZE, SIZE),
        "t": torch.randint(0, STEPS, (batch_size,)),
    }


def loss_fn(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    t = batch["t"]
    alpha_bar = torch.cos((t.float() / STEPS + 0.008) / 1.008 * math.pi / 2).pow(2)
    alpha_bar = alpha_bar[:, None, None, None]
    noisy = alpha_bar.sqrt() * batch["images"] + (1 - alpha_bar).sqrt() * batch["noise"]
    return F.mse_loss(model(noisy, t).float(), batch["noise"])
