"""A patch-based image inpainting network, as user code: ``fold_inpainting.py:make_model``.

The masked image and its hole mask (four channels) are cut into overlapping 16x16 patches
at stride 8 by ``F.unfold``; each patch is embedded by a linear layer, a learned position
embedding is added, and ten pre-norm self-attention blocks (``nn.MultiheadAttention``, GELU
MLP) mix the 1,024 patch tokens. A linear head predicts every patch's pixels and ``F.fold``
sums the overlapping patches back into a 256x256 image, divided by the fold of a ones map
(how many patches cover each pixel). The prediction is composited into the known pixels
outside the holes. Loss: L1 on the hole pixels, a smaller L1 on the known ones, and a total
variation term on the composite.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SIZE = 256
PATCH, STRIDE, PAD = 16, 8, 4
GRID = (SIZE + 2 * PAD - PATCH) // STRIDE + 1


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class PatchInpainter(nn.Module):
    def __init__(self, dim: int = 512, depth: int = 10, heads: int = 8) -> None:
        super().__init__()
        self.embed = nn.Linear(4 * PATCH * PATCH, dim)
        self.pos = nn.Parameter(torch.zeros(1, GRID * GRID, dim))
        nn.init.trunc_normal_(self.pos, std=0.02)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 3 * PATCH * PATCH)

    def forward(self, image: torch.Tensor, hole: torch.Tensor) -> torch.Tensor:
        x = torch.cat([image * (1 - hole), hole], 1)
        patches = F.unfold(x, PATCH, padding=PAD, stride=STRIDE)  # (b, 4*P*P, L)
        tokens = self.embed(patches.transpose(1, 2)) + self.pos
        for block in self.blocks:
            tokens = block(tokens)
        pixels = self.head(self.norm(tokens)).transpose(1, 2)  # (b, 3*P*P, L)
        out = F.fold(pixels, (SIZE, SIZE), PATCH, padding=PAD, stride=STRIDE)
        ones = torch.ones(1, PATCH * PATCH, GRID * GRID, device=out.device, dtype=out.dtype)
        count = F.fold(ones, (SIZE, SIZE), PATCH, padding=PAD, stride=STRIDE)
        return torch.sigmoid(out / count)


def make_model() -> nn.Module:
    return PatchInpainter()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(5206)
    images = torch.rand(batch_size, 3, SIZE, SIZE, generator=gen)
    ys = torch.arange(SIZE)[None, :, None]
    xs = torch.arange(SIZE)[None, None, :]
    hole = torch.zeros(batch_size, SIZE, SIZE, dtype=torch.bool)
    for _ in range(3):  # three random rectangles per image
        top, left = (torch.randint(0, SIZE - 96, (2, batch_size, 1, 1), generator=gen)).unbind(0)
        h, w = (torch.randint(32, 96, (2, batch_size, 1, 1), generator=gen)).unbind(0)
        hole |= (ys >= top) & (ys < top + h) & (xs >= left) & (xs < left + w)
    return images, hole[:, None].float()


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    images, hole = batch
    pred = model(images, hole).float()
    composite = pred * hole + images * (1 - hole)
    err = (pred - images).abs()
    hole_l1 = (err * hole).sum() / (3 * hole.sum()).clamp(min=1)
    valid_l1 = (err * (1 - hole)).sum() / (3 * (1 - hole).sum()).clamp(min=1)
    tv = torch.diff(composite, dim=2).abs().mean() + torch.diff(composite, dim=3).abs().mean()
    return 6 * hole_l1 + valid_l1 + 0.1 * tv
