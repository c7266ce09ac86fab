"""A Perceiver image classifier, as user code: ``perceiver.py:make_model``.

Every pixel is a token: its RGB values joined (``torch.cat``) to Fourier features of its
2-d position (sines and cosines of a ``meshgrid`` over frequency bands, a buffer expanded over
the batch). A small array of learned latents cross-attends to the 16,384 pixel tokens (one
head, ``scaled_dot_product_attention`` with queries and keys of different lengths), then a
latent transformer of self-attention and GEGLU feed-forward blocks; the cross-attention and
latent blocks are applied again with the same weights. Mean over the latents, a linear head.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

SIZE = 128
BANDS = 6
MAX_FREQ = 10.0
CLASSES = 1000


def fourier_positions(size: int, bands: int, max_freq: float) -> torch.Tensor:
    """(size * size, 2 * (2 * bands + 1)): each axis's position, and its sines and cosines."""
    axis = torch.linspace(-1.0, 1.0, size)
    pos = torch.stack(torch.meshgrid(axis, axis, indexing="ij"), -1)  # (S, S, 2)
    freqs = torch.linspace(1.0, max_freq / 2, bands)
    angles = pos[..., None] * freqs * math.pi  # (S, S, 2, bands)
    feats = torch.cat([angles.sin(), angles.cos(), pos[..., None]], -1)
    return feats.flatten(2).flatten(0, 1)


class GEGLU(nn.Module):
    def __init__(self, dim: int, mult: int = 4) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, dim * mult * 2)
        self.down = nn.Linear(dim * mult, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, gate = self.up(self.norm(x)).chunk(2, dim=-1)
        return self.down(a * F.gelu(gate))


class Attention(nn.Module):
    def __init__(self, dim: int, context_dim: int, heads: int, head_dim: int) -> None:
        super().__init__()
        self.heads = heads
        inner = heads * head_dim
        self.norm = nn.LayerNorm(dim)
        self.norm_context = nn.LayerNorm(context_dim) if context_dim != dim else None
        self.q = nn.Linear(dim, inner, bias=False)
        self.kv = nn.Linear(context_dim, 2 * inner, bias=False)
        self.out = nn.Linear(inner, dim)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        x = self.norm(x)
        if context is None:
            context = x
        elif self.norm_context is not None:
            context = self.norm_context(context)
        b, n, _ = x.shape
        q = self.q(x).view(b, n, self.heads, -1).transpose(1, 2)
        k, v = self.kv(context).view(b, context.shape[1], 2, self.heads, -1).unbind(2)
        att = F.scaled_dot_product_attention(q, k.transpose(1, 2), v.transpose(1, 2))
        return self.out(att.transpose(1, 2).reshape(b, n, -1))


class Perceiver(nn.Module):
    def __init__(
        self,
        latents: int = 256,
        dim: int = 512,
        depth: int = 2,
        latent_blocks: int = 6,
        heads: int = 8,
    ) -> None:
        super().__init__()
        self.register_buffer("pos", fourier_positions(SIZE, BANDS, MAX_FREQ), persistent=False)
        input_dim = 3 + self.pos.shape[-1]
        self.latents = nn.Parameter(torch.randn(latents, dim) * 0.02)
        self.cross = Attention(dim, input_dim, heads=1, head_dim=64)
        self.cross_ff = GEGLU(dim)
        self.self_attn = nn.ModuleList(Attention(dim, dim, heads, 64) for _ in range(latent_blocks))
        self.self_ff = nn.ModuleList(GEGLU(dim) for _ in range(latent_blocks))
        self.depth = depth
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, CLASSES)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        b = images.shape[0]
        pixels = images.flatten(2).transpose(1, 2)  # (B, H*W, 3)
        tokens = torch.cat([pixels, self.pos.expand(b, -1, -1)], -1)
        x = self.latents.expand(b, -1, -1)
        for _ in range(self.depth):  # the same weights each time
            x = x + self.cross(x, tokens)
            x = x + self.cross_ff(x)
            for attn, ff in zip(self.self_attn, self.self_ff, strict=True):
                x = x + attn(x)
                x = x + ff(x)
        return self.head(self.norm(x.mean(1)))


def make_model() -> nn.Module:
    return Perceiver()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(batch_size, 3, SIZE, SIZE), torch.randint(0, CLASSES, (batch_size,))


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    images, labels = batch
    return F.cross_entropy(model(images), labels, label_smoothing=0.1)
