"""A decoder-only language model with hand-written attention, as user code:
``handwritten_attention_lm.py:make_model``.

No ``scaled_dot_product_attention``: scores ``q @ k^T``, a causal mask from ``torch.triu``
filled with ``masked_fill``, softmax in float32, dropout, ``@ v``; RMSNorm and rotary
embeddings written out; a SwiGLU MLP; tied embeddings.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 32000
DEFAULT_SEQ_LEN = 1024


class RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).type_as(
            x
        ) * self.weight


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-b, a], -1) * sin


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = RMSNorm(dim), RMSNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)
        self.gate = nn.Linear(dim, 4 * dim, bias=False)
        self.up = nn.Linear(dim, 4 * dim, bias=False)
        self.down = nn.Linear(4 * dim, dim, bias=False)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), 1)
        weights = self.drop(scores.masked_fill(causal, float("-inf")).float().softmax(-1))
        att = (weights.type_as(v) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.out(att)
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class LM(nn.Module):
    def __init__(self, dim: int = 512, depth: int = 8, heads: int = 8) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.norm = RMSNorm(dim)
        half = dim // heads // 2
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(half) / half), False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1]
        angles = torch.outer(torch.arange(t, device=ids.device).float(), self.inv_freq)
        cos, sin = angles.cos().repeat(1, 2), angles.sin().repeat(1, 2)
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.norm(x) @ self.embed.weight.t()


def make_model() -> nn.Module:
    return LM()


def make_batch(batch_size: int, seq_len: int | None) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch_size, (seq_len or DEFAULT_SEQ_LEN) + 1))


def loss_fn(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    logits = model(batch[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten())
