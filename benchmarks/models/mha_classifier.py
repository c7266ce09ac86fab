"""A transformer encoder text classifier on ``nn.MultiheadAttention``, as user code:
``mha_classifier.py:make_model``.

Padded batches of varied lengths: a ``key_padding_mask`` built from the lengths (fixed
shapes), a sinusoidal position table in a buffer, pre-norm blocks written around
``nn.MultiheadAttention`` (``batch_first``, ``need_weights=False``) and a GELU MLP; masked
mean pooling, a classifier.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 50000
CLASSES = 20
DEFAULT_SEQ_LEN = 512
MAX_LEN = 4096


def sinusoids(length: int, dim: int) -> torch.Tensor:
    pos = torch.arange(length).float()[:, None]
    freqs = torch.exp(torch.arange(0, dim, 2).float() * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(pos * freqs)
    table[:, 1::2] = torch.cos(pos * freqs)
    return table


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, dropout=0.1, batch_first=True)
        self.mlp = nn.Sequential(
            nn.Linear(dim, 4 * dim), nn.GELU(), nn.Dropout(0.1), nn.Linear(4 * dim, dim)
        )
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        att, _ = self.attn(h, h, h, key_padding_mask=padding, need_weights=False)
        x = x + self.drop(att)
        return x + self.drop(self.mlp(self.norm2(x)))


class MHAClassifier(nn.Module):
    def __init__(self, dim: int = 512, depth: int = 6, heads: int = 8) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim, padding_idx=0)
        self.register_buffer("positions", sinusoids(MAX_LEN, dim), False)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, CLASSES)
        self.scale = math.sqrt(dim)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1]
        padding = torch.arange(t, device=ids.device)[None, :] >= lengths[:, None]  # True: pad
        x = self.embed(ids) * self.scale + self.positions[:t]
        for block in self.blocks:
            x = block(x, padding)
        keep = (~padding).unsqueeze(-1).to(x.dtype)
        pooled = (self.norm(x) * keep).sum(1) / keep.sum(1)
        return self.head(pooled)


def make_model() -> nn.Module:
    return MHAClassifier()


def make_batch(batch_size: int, seq_len: int | None) -> dict[str, torch.Tensor]:
    n = seq_len or DEFAULT_SEQ_LEN
    lengths = torch.randint(n // 4, n + 1, (batch_size,))
    lengths[0] = n
    ids = torch.randint(1, VOCAB, (batch_size, n))
    ids[torch.arange(n)[None, :] >= lengths[:, None]] = 0
    return {"ids": ids, "lengths": lengths, "y": torch.randint(0, CLASSES, (batch_size,))}


def loss_fn(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return F.cross_entropy(model(batch["ids"], batch["lengths"]), batch["y"])
