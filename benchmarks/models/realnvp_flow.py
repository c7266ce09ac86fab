"""A RealNVP normalizing flow on 32x32 colour images, as user code:
``realnvp_flow.py:make_model``.

Images dequantised with uniform noise and mapped through a logit; affine coupling layers whose
scale and shift come from a small residual convolutional network (``BatchNorm2d``, ReLU) fed
the masked input: alternating checkerboard masks (buffers), then a squeeze by
``F.pixel_unshuffle`` and channel-wise couplings on ``chunk`` halves; half the channels
factored out after each scale. Each coupling's log-determinant is the sum of its
``tanh``-bounded log-scales; the latent's log-density from ``torch.distributions.Normal``;
the loss is bits per dimension.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Normal

SIZE = 32
ALPHA = 0.05


def checkerboard(size: int, flip: bool) -> torch.Tensor:
    i = torch.arange(size)
    mask = ((i[:, None] + i[None, :]) % 2 == 0).float()
    return (1 - mask if flip else mask).view(1, 1, size, size)


class ResNet(nn.Module):
    def __init__(self, cin: int, mid: int, cout: int, blocks: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(cin, mid, 3, padding=1), nn.BatchNorm2d(mid))
        self.blocks = nn.ModuleList(
            nn.Sequential(
                nn.ReLU(),
                nn.Conv2d(mid, mid, 3, padding=1, bias=False),
                nn.BatchNorm2d(mid),
                nn.ReLU(),
                nn.Conv2d(mid, mid, 3, padding=1),
                nn.BatchNorm2d(mid),
            )
            for _ in range(blocks)
        )
        self.out = nn.Conv2d(mid, cout, 3, padding=1)
        nn.init.zeros_(self.out.weight)  # each coupling starts as the identity
        nn.init.zeros_(self.out.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for block in self.blocks:
            x = x + block(x)
        return self.out(F.relu(x))


class Coupling(nn.Module):
    """An affine coupling; the mask is a checkerboard, or None for the channel halves."""

    def __init__(self, channels: int, mid: int, blocks: int, mask: torch.Tensor | None) -> None:
        super().__init__()
        self.channelwise = mask is None
        cin = channels // 2 if self.channelwise else channels
        self.net = ResNet(cin, mid, 2 * cin, blocks)
        self.scale = nn.Parameter(torch.ones(1, cin, 1, 1))
        if mask is not None:
            self.register_buffer("mask", mask)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.channelwise:
            fixed, moved = x.chunk(2, dim=1)
            s, t = self.net(fixed).chunk(2, dim=1)
            s = self.scale * torch.tanh(s)
            return torch.cat([fixed, moved * s.exp() + t], 1), s.flatten(1).sum(1)
        s, t = self.net(x * self.mask).chunk(2, dim=1)
        s = self.scale * torch.tanh(s) * (1 - self.mask)
        t = t * (1 - self.mask)
        return x * self.mask + (1 - self.mask) * (x * s.exp() + t), s.flatten(1).sum(1)


class RealNVP(nn.Module):
    def __init__(self, scales: int = 2, mid: int = 64, blocks: int = 8) -> None:
        super().__init__()
        self.scales = nn.ModuleList()
        channels, size = 3, SIZE
        for _ in range(scales):
            checks = [
                Coupling(channels, mid, blocks, checkerboard(size, i % 2 == 1)) for i in range(3)
            ]
            channelwise = [Coupling(4 * channels, 2 * mid, blocks, None) for _ in range(3)]
            self.scales.append(nn.ModuleList([nn.ModuleList(checks), nn.ModuleList(channelwise)]))
            channels, size, mid = 2 * channels, size // 2, 2 * mid
        self.last = nn.ModuleList(
            Coupling(channels, mid, blocks, checkerboard(size, i % 2 == 1)) for i in range(4)
        )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, 3, 32, 32) in [0, 1] -> the latent (B, 3072) and the log-determinant (B,)."""
        # dequantise and logit: the transform's own log-determinant counted
        x = (x * 255 + torch.rand_like(x)) / 256
        y = ALPHA + (1 - 2 * ALPHA) * x
        x = y.log() - (1 - y).log()
        logdet = (math.log(1 - 2 * ALPHA) - y.log() - (1 - y).log()).flatten(1).sum(1)
        factored = []
        for checks, channelwise in self.scales:
            for coupling in checks:
                x, ld = coupling(x)
                logdet = logdet + ld
            x = F.pixel_unshuffle(x, 2)
            for i, coupling in enumerate(channelwise):
                if i % 2 == 1:  # swap the halves so each is moved in turn
                    x = torch.cat(x.chunk(2, dim=1)[::-1], 1)
                x, ld = coupling(x)
                logdet = logdet + ld
            out, x = x.chunk(2, dim=1)
            factored.append(out.flatten(1))
        for coupling in self.last:
            x, ld = coupling(x)
            logdet = logdet + ld
        return torch.cat([*factored, x.flatten(1)], 1), logdet


def make_model() -> nn.Module:
    return RealNVP()


def make_batch(batch_size: int, seq_len: int | None) -> torch.Tensor:
    return torch.randint(0, 256, (batch_size, 3, SIZE, SIZE)).float() / 255


def loss_fn(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    z, logdet = model(batch)
    prior = Normal(z.new_zeros(()), z.new_ones(()))
    log_px = prior.log_prob(z).sum(1) + logdet
    dims = z.shape[1]
    return (-log_px / (dims * math.log(2)) + 8).mean()
