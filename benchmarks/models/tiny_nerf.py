"""A NeRF trained on batches of rays, coarse and fine, as user code: ``tiny_nerf.py:make_model``.

Each ray is sampled at 64 stratified depths (``linspace`` plus uniform jitter); the points
and view directions get sinusoidal positional encodings (``sin``/``cos`` of powers of two
times the coordinates) and go through an 8-layer MLP with a skip connection to a density and
a view-dependent colour. Volume rendering is written out: the distances between samples
(``diff``), the opacity ``1 - exp(-sigma * delta)``, the transmittance as an exclusive
``cumprod`` and the weights summed along the ray. The fine pass draws 128 more depths by
inverse-transform sampling from the coarse weights (detached): a ``cumsum`` CDF,
``searchsorted`` of uniform samples, ``gather`` of the bracketing bins and linear
interpolation; the coarse and fine depths are merged by ``sort`` and rendered by a second
MLP. The loss is the mean squared colour error of both passes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

COARSE = 64
FINE = 128
NEAR, FAR = 2.0, 6.0


def encode(x: torch.Tensor, freqs: int) -> torch.Tensor:
    scales = 2.0 ** torch.arange(freqs, device=x.device, dtype=x.dtype) * torch.pi
    angles = x[..., None] * scales  # (..., 3, freqs)
    return torch.cat([x, angles.sin().flatten(-2), angles.cos().flatten(-2)], -1)


class RadianceField(nn.Module):
    def __init__(self, width: int = 256, pos_freqs: int = 10, dir_freqs: int = 4) -> None:
        super().__init__()
        self.pos_freqs, self.dir_freqs = pos_freqs, dir_freqs
        pos_dim, dir_dim = 3 + 6 * pos_freqs, 3 + 6 * dir_freqs
        self.first = nn.ModuleList(
            [nn.Linear(pos_dim, width)] + [nn.Linear(width, width) for _ in range(3)]
        )
        self.second = nn.ModuleList(
            [nn.Linear(width + pos_dim, width)] + [nn.Linear(width, width) for _ in range(3)]
        )
        self.sigma = nn.Linear(width, 1)
        self.feature = nn.Linear(width, width)
        self.color = nn.Sequential(
            nn.Linear(width + dir_dim, width // 2), nn.ReLU(), nn.Linear(width // 2, 3)
        )

    def forward(
        self, points: torch.Tensor, dirs: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        p = encode(points, self.pos_freqs)
        h = p
        for layer in self.first:
            h = F.relu(layer(h))
        h = torch.cat([h, p], -1)
        for layer in self.second:
            h = F.relu(layer(h))
        sigma = self.sigma(h).squeeze(-1)
        d = encode(dirs, self.dir_freqs).expand(*h.shape[:-1], -1)
        rgb = torch.sigmoid(self.color(torch.cat([self.feature(h), d], -1)))
        return sigma, rgb


def render(
    field: nn.Module, origins: torch.Tensor, dirs: torch.Tensor, depths: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    points = origins[:, None] + depths[..., None] * dirs[:, None]  # (rays, samples, 3)
    sigma, rgb = field(points, dirs[:, None])
    delta = torch.diff(depths, dim=-1)
    delta = torch.cat([delta, torch.full_like(delta[:, :1], 1e10)], -1)
    alpha = 1 - torch.exp(-F.relu(sigma) * delta * dirs.norm(dim=-1, keepdim=True))
    trans = torch.cumprod(1 - alpha + 1e-10, -1)
    trans = torch.cat([torch.ones_like(trans[:, :1]), trans[:, :-1]], -1)
    weights = alpha * trans
    return (weights[..., None] * rgb).sum(1), weights


def sample_pdf(bins: torch.Tensor, weights: torch.Tensor, n: int) -> torch.Tensor:
    pdf = weights + 1e-5
    pdf = pdf / pdf.sum(-1, keepdim=True)
    cdf = torch.cat([torch.zeros_like(pdf[:, :1]), torch.cumsum(pdf, -1)], -1)
    u = torch.rand(cdf.shape[0], n, device=cdf.device)
    above = torch.searchsorted(cdf, u, right=True).clamp(max=cdf.shape[-1] - 1)
    below = (above - 1).clamp(min=0)
    cdf_lo, cdf_hi = cdf.gather(-1, below), cdf.gather(-1, above)
    bin_lo, bin_hi = bins.gather(-1, below), bins.gather(-1, above)
    span = (cdf_hi - cdf_lo).clamp(min=1e-5)
    return bin_lo + (u - cdf_lo) / span * (bin_hi - bin_lo)


class NeRF(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.coarse = RadianceField()
        self.fine = RadianceField()

    def forward(
        self, origins: torch.Tensor, dirs: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        rays = origins.shape[0]
        edges = torch.linspace(NEAR, FAR, COARSE + 1, device=origins.device)
        lo, hi = edges[:-1], edges[1:]
        depths = lo + (hi - lo) * torch.rand(rays, COARSE, device=origins.device)
        rgb_coarse, weights = render(self.coarse, origins, dirs, depths)
        mids = 0.5 * (depths[:, 1:] + depths[:, :-1])
        fine = sample_pdf(mids, weights[:, 1:-1].detach(), FINE).detach()
        merged, _ = torch.sort(torch.cat([depths, fine], -1), -1)
        rgb_fine, _ = render(self.fine, origins, dirs, merged)
        return rgb_coarse, rgb_fine


def make_model() -> nn.Module:
    return NeRF()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, ...]:
    origins = F.normalize(torch.randn(batch_size, 3), dim=-1) * 4.0
    dirs = F.normalize(-origins + 0.5 * torch.randn(batch_size, 3), dim=-1)
    return origins, dirs, torch.rand(batch_size, 3)


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    origins, dirs, target = batch
    rgb_coarse, rgb_fine = model(origins, dirs)
    return F.mse_loss(rgb_coarse, target) + F.mse_loss(rgb_fine, target)
