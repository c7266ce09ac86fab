"""A class-conditional diffusion transformer (DiT) on image latents, as user code:
``dit.py:make_model``.

The noisy 4-channel latent is cut into 2x2 patches by a strided ``Conv2d`` and flattened to
tokens, plus a fixed 2-d sine-cosine position buffer. The condition is a sinusoidal
timestep embedding through an MLP plus a class embedding (labels dropped to a null class
with ``torch.where`` for classifier-free guidance). Every block is adaLN-Zero: a zero-
initialised ``Linear`` of the SiLU'd condition gives six vectors (shift, scale and gate for
attention and for the MLP), applied to un-affine ``LayerNorm`` outputs by broadcasting;
attention by ``scaled_dot_product_attention``. The final adaLN layer and a linear map back
to patches (noise and a learned variance), unpatchified by ``reshape`` and ``einsum``.
The loss noises the latents on the device (a linear beta schedule's ``alphas_cumprod``
buffer indexed by random timesteps) and regresses the noise with MSE.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

LATENT = 64  # 512x512 images through an 8x autoencoder
CHANNELS = 4
PATCH = 2
CLASSES = 1000
STEPS = 1000
LABEL_DROP = 0.1


def sincos_2d(dim: int, grid: int) -> torch.Tensor:
    """(grid * grid, dim): sines and cosines of each token's row and column."""
    omega = 1.0 / 10000 ** (torch.arange(dim // 4, dtype=torch.float64) / (dim // 4))
    coords = torch.arange(grid, dtype=torch.float64)
    rows, cols = torch.meshgrid(coords, coords, indexing="ij")
    parts = []
    for pos in (rows.flatten(), cols.flatten()):
        angles = pos[:, None] * omega[None]
        parts += [angles.sin(), angles.cos()]
    return torch.cat(parts, 1).float()


def timestep_embedding(t: torch.Tensor, dim: int, max_period: float = 10000.0) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(
        -math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half
    )
    angles = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(angles), torch.sin(angles)], -1)


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class DiTBlock(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: float = 4.0) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        hidden = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(
            nn.Linear(dim, hidden), nn.GELU(approximate="tanh"), nn.Linear(hidden, dim)
        )
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim))
        nn.init.zeros_(self.ada[1].weight)
        nn.init.zeros_(self.ada[1].bias)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(b, n, d))

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift_a, scale_a, gate_a, shift_m, scale_m, gate_m = self.ada(c).chunk(6, dim=1)
        x = x + gate_a.unsqueeze(1) * self.attention(modulate(self.norm1(x), shift_a, scale_a))
        return x + gate_m.unsqueeze(1) * self.mlp(modulate(self.norm2(x), shift_m, scale_m))


class DiT(nn.Module):
    def __init__(self, dim: int = 768, depth: int = 12, heads: int = 12) -> None:
        super().__init__()
        self.grid = LATENT // PATCH
        self.out_channels = 2 * CHANNELS  # noise and variance
        self.patchify = nn.Conv2d(CHANNELS, dim, PATCH, stride=PATCH)
        self.register_buffer("pos", sincos_2d(dim, self.grid)[None], persistent=False)
        self.t_mlp = nn.Sequential(nn.Linear(256, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.y_embed = nn.Embedding(CLASSES + 1, dim)  # the last row is the null class
        self.blocks = nn.ModuleList(DiTBlock(dim, heads) for _ in range(depth))
        self.final_norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.final_ada = nn.Sequential(nn.SiLU(), nn.Linear(dim, 2 * dim))
        self.final = nn.Linear(dim, PATCH * PATCH * self.out_channels)
        for layer in (self.final_ada[1], self.final):
            nn.init.zeros_(layer.weight)
            nn.init.zeros_(layer.bias)

    def unpatchify(self, x: torch.Tensor) -> torch.Tensor:
        b, g, p, c = x.shape[0], self.grid, PATCH, self.out_channels
        x = x.reshape(b, g, g, p, p, c)
        return torch.einsum("nhwpqc->nchpwq", x).reshape(b, c, g * p, g * p)

    def forward(self, x: torch.Tensor, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x = self.patchify(x).flatten(2).transpose(1, 2) + self.pos
        c = self.t_mlp(timestep_embedding(t, 256)) + self.y_embed(y)
        for block in self.blocks:
            x = block(x, c)
        shift, scale = self.final_ada(c).chunk(2, dim=1)
        x = self.final(modulate(self.final_norm(x), shift, scale))
        return self.unpatchify(x)


class Diffusion(nn.Module):
    """The DiT and its noise schedule."""

    def __init__(self) -> None:
        super().__init__()
        self.net = DiT()
        betas = torch.linspace(1e-4, 0.02, STEPS, dtype=torch.float64)
        self.register_buffer("alphas_cumprod", torch.cumprod(1 - betas, 0).float())

    def forward(self, x: torch.Tensor, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.net(x, t, y)


def make_model() -> nn.Module:
    return Diffusion()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    latents = torch.randn(batch_size, CHANNELS, LATENT, LATENT) * 0.18215
    return latents, torch.randint(0, CLASSES, (batch_size,))


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x0, y = batch
    b = x0.shape[0]
    t = torch.randint(0, STEPS, (b,), device=x0.device)
    y = torch.where(torch.rand(b, device=y.device) < LABEL_DROP, CLASSES, y)
    a = model.alphas_cumprod[t].view(b, 1, 1, 1)
    noise = torch.randn_like(x0)
    x_t = a.sqrt() * x0 + (1 - a).sqrt() * noise
    out = model(x_t, t, y)
    eps, _variance = out.split(CHANNELS, dim=1)
    return F.mse_loss(eps.float(), noise)
