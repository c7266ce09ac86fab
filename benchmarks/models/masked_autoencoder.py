"""A masked autoencoder (MAE) pre-training a ViT-B/16, as user code:
``masked_autoencoder.py:make_model``.

Patches embedded by a strided ``Conv2d`` plus a fixed 2-d sine-cosine position buffer.
Random masking on the device: uniform noise per patch, ``argsort`` to shuffle and again to
restore, the kept 25% taken by ``gather`` with an expanded index; a class token joined by
``torch.cat``. The encoder's blocks (hand-written pre-norm attention by
``scaled_dot_product_attention`` and GELU MLP) run under ``torch.utils.checkpoint`` with
``use_reentrant=False``. A narrower decoder: learned mask tokens appended, the sequence
unshuffled by ``gather`` with ``ids_restore``, its own position buffer, eight blocks. The
loss is MSE to per-patch normalised pixels (patchified by ``reshape`` and ``einsum``),
averaged over the masked patches only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

SIZE = 224
PATCH = 16
MASK_RATIO = 0.75


def sincos_2d(dim: int, grid: int, cls_token: bool) -> torch.Tensor:
    omega = 1.0 / 10000 ** (torch.arange(dim // 4, dtype=torch.float64) / (dim // 4))
    coords = torch.arange(grid, dtype=torch.float64)
    rows, cols = torch.meshgrid(coords, coords, indexing="ij")
    parts = []
    for pos in (rows.flatten(), cols.flatten()):
        angles = pos[:, None] * omega[None]
        parts += [angles.sin(), angles.cos()]
    table = torch.cat(parts, 1).float()
    if cls_token:
        table = torch.cat([torch.zeros(1, dim), table], 0)
    return table[None]


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(b, n, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class MAE(nn.Module):
    def __init__(
        self,
        dim: int = 768,
        depth: int = 12,
        heads: int = 12,
        dec_dim: int = 512,
        dec_depth: int = 8,
        dec_heads: int = 16,
    ) -> None:
        super().__init__()
        grid = SIZE // PATCH
        self.patch_embed = nn.Conv2d(3, dim, PATCH, stride=PATCH)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.register_buffer("pos", sincos_2d(dim, grid, True), persistent=False)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.dec_embed = nn.Linear(dim, dec_dim)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, dec_dim))
        self.register_buffer("dec_pos", sincos_2d(dec_dim, grid, True), persistent=False)
        self.dec_blocks = nn.ModuleList(Block(dec_dim, dec_heads) for _ in range(dec_depth))
        self.dec_norm = nn.LayerNorm(dec_dim, eps=1e-6)
        self.dec_pred = nn.Linear(dec_dim, PATCH * PATCH * 3)
        nn.init.normal_(self.cls_token, std=0.02)
        nn.init.normal_(self.mask_token, std=0.02)

    def random_masking(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, n, d = x.shape
        keep = int(n * (1 - MASK_RATIO))
        noise = torch.rand(b, n, device=x.device)
        ids_shuffle = torch.argsort(noise, dim=1)
        ids_restore = torch.argsort(ids_shuffle, dim=1)
        ids_keep = ids_shuffle[:, :keep]
        kept = torch.gather(x, 1, ids_keep.unsqueeze(-1).expand(-1, -1, d))
        mask = torch.ones(b, n, device=x.device)
        mask[:, :keep] = 0
        mask = torch.gather(mask, 1, ids_restore)
        return kept, mask, ids_restore

    def encode(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = self.patch_embed(images).flatten(2).transpose(1, 2) + self.pos[:, 1:]
        x, mask, ids_restore = self.random_masking(x)
        cls = (self.cls_token + self.pos[:, :1]).expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], 1)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return self.norm(x), mask, ids_restore

    def decode(self, x: torch.Tensor, ids_restore: torch.Tensor) -> torch.Tensor:
        x = self.dec_embed(x)
        b, n = ids_restore.shape
        masked = self.mask_token.expand(b, n + 1 - x.shape[1], -1)
        seq = torch.cat([x[:, 1:], masked], 1)
        index = ids_restore.unsqueeze(-1).expand(-1, -1, x.shape[2])
        seq = torch.gather(seq, 1, index)
        x = torch.cat([x[:, :1], seq], 1) + self.dec_pos
        for block in self.dec_blocks:
            x = block(x)
        return self.dec_pred(self.dec_norm(x))[:, 1:]

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        latent, mask, ids_restore = self.encode(images)
        return self.decode(latent, ids_restore), mask


def patchify(images: torch.Tensor) -> torch.Tensor:
    b, g = images.shape[0], SIZE // PATCH
    x = images.reshape(b, 3, g, PATCH, g, PATCH)
    return torch.einsum("nchpwq->nhwpqc", x).reshape(b, g * g, PATCH * PATCH * 3)


def make_model() -> nn.Module:
    return MAE()


def make_batch(batch_size: int, seq_len: int | None) -> torch.Tensor:
    return torch.randn(batch_size, 3, SIZE, SIZE)


def loss_fn(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    pred, mask = model(batch)
    target = patchify(batch)
    mean = target.mean(-1, keepdim=True)
    var = target.var(-1, keepdim=True)
    target = (target - mean) / (var + 1e-6) ** 0.5
    per_patch = ((pred.float() - target) ** 2).mean(-1)
    return (per_patch * mask).sum() / mask.sum()
