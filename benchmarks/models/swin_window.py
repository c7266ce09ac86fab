"""A small Swin-style vision transformer written out, as user code:
``swin_window.py:make_model``.

Attention within 7x7 windows cut by ``view``/``permute``; every second block shifts the
feature map by ``torch.roll`` and masks the pairs that the shift brought together (a mask
buffer added to the scores); a learned relative position bias table gathered by an index
buffer; patch merging by strided slicing, ``torch.cat``, ``LayerNorm`` and a linear layer.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SIZE = 224
PATCH = 4
WINDOW = 7
CLASSES = 1000


def partition(x: torch.Tensor, w: int) -> torch.Tensor:
    """(B, H, W, C) -> (B * windows, w * w, C)."""
    b, h, wd, c = x.shape
    x = x.view(b, h // w, w, wd // w, w, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, w * w, c)


def merge(windows: torch.Tensor, w: int, b: int, h: int, wd: int) -> torch.Tensor:
    """(B * windows, w * w, C) -> (B, H, W, C)."""
    x = windows.view(b, h // w, wd // w, w, w, -1).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(b, h, wd, -1)


def shift_mask(res: int, w: int, shift: int) -> torch.Tensor:
    """(windows, w*w, w*w): -100 between positions that come from different regions."""
    region = torch.zeros(1, res, res, 1)
    cuts = (slice(0, -w), slice(-w, -shift), slice(-shift, None))
    label = 0
    for hs in cuts:
        for ws in cuts:
            region[:, hs, ws, :] = label
            label += 1
    r = partition(region, w).squeeze(-1)
    return (r.unsqueeze(1) - r.unsqueeze(2)).ne(0).float() * -100.0


class WindowAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.drop = nn.Dropout(0.1)
        self.bias_table = nn.Parameter(torch.randn((2 * WINDOW - 1) ** 2, heads) * 0.02)
        coords = torch.stack(
            torch.meshgrid(torch.arange(WINDOW), torch.arange(WINDOW), indexing="ij")
        )
        rel = (coords.flatten(1)[:, :, None] - coords.flatten(1)[:, None, :]).permute(1, 2, 0)
        rel = rel + (WINDOW - 1)
        self.register_buffer("bias_index", rel[..., 0] * (2 * WINDOW - 1) + rel[..., 1], False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        bw, n, c = x.shape
        q, k, v = self.qkv(x).view(bw, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = (q * self.scale) @ k.transpose(-2, -1)
        bias = self.bias_table[self.bias_index.view(-1)].view(n, n, -1).permute(2, 0, 1)
        scores = scores + bias.unsqueeze(0)
        if mask is not None:
            windows = mask.shape[0]
            scores = scores.view(bw // windows, windows, self.heads, n, n) + mask[None, :, None]
            scores = scores.view(bw, self.heads, n, n)
        att = self.drop(scores.softmax(-1)) @ v
        return self.proj(att.transpose(1, 2).reshape(bw, n, c))


class SwinBlock(nn.Module):
    def __init__(self, dim: int, heads: int, res: int, shift: int) -> None:
        super().__init__()
        self.shift = shift if res > WINDOW else 0
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        mask = shift_mask(res, WINDOW, self.shift) if self.shift else None
        self.register_buffer("mask", mask, False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, h, w, _ = x.shape
        y = self.norm1(x)
        if self.shift:
            y = torch.roll(y, (-self.shift, -self.shift), (1, 2))
        y = merge(self.attn(partition(y, WINDOW), self.mask), WINDOW, b, h, w)
        if self.shift:
            y = torch.roll(y, (self.shift, self.shift), (1, 2))
        x = x + y
        return x + self.mlp(self.norm2(x))


class PatchMerging(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(4 * dim)
        self.reduce = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = [x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]]
        return self.reduce(self.norm(torch.cat(parts, -1)))


class Swin(nn.Module):
    def __init__(
        self,
        dim: int = 64,
        depths: tuple[int, ...] = (2, 2, 6, 2),
        heads: tuple[int, ...] = (2, 4, 8, 16),
    ) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, dim, PATCH, PATCH)
        self.embed_norm = nn.LayerNorm(dim)
        layers: list[nn.Module] = []
        res = SIZE // PATCH
        for i, (depth, h) in enumerate(zip(depths, heads, strict=True)):
            layers += [SwinBlock(dim, h, res, (j % 2) * (WINDOW // 2)) for j in range(depth)]
            if i < len(depths) - 1:
                layers.append(PatchMerging(dim))
                dim, res = 2 * dim, res // 2
        self.layers = nn.Sequential(*layers)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed_norm(self.embed(x).permute(0, 2, 3, 1))  # (B, H, W, C)
        x = self.norm(self.layers(x))
        return self.head(x.mean((1, 2)))


def make_model() -> nn.Module:
    return Swin()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(batch_size, 3, SIZE, SIZE), torch.randint(0, CLASSES, (batch_size,))


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y, label_smoothing=0.1)
