"""A LLaMA-style decoder with complex-number rotary embeddings, as user code:
``complex_rotary_lm.py:make_model``.

The rotary table is built once as unit complex numbers by ``torch.polar`` (a complex64
buffer). In every attention layer the queries and keys are cast to float32, viewed as
complex pairs by ``torch.view_as_complex``, multiplied by the table, turned back by
``torch.view_as_real`` and flattened, then cast back to the activations' dtype. Grouped-query
attention (12 query heads sharing 4 key/value heads, the latter repeated by ``expand`` and
``reshape``) through ``F.scaled_dot_product_attention`` with ``is_causal=True``; RMSNorm
written with ``rsqrt``; a SwiGLU feed-forward; untied input and output embeddings over a
32,000-token vocabulary; next-token cross-entropy.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 32000
DEFAULT_SEQ_LEN = 2048


def rotary_table(head_dim: int, length: int, theta: float = 10000.0) -> torch.Tensor:
    freqs = 1.0 / theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
    angles = torch.outer(torch.arange(length).float(), freqs)
    return torch.polar(torch.ones_like(angles), angles)  # complex64, (length, head_dim / 2)


def apply_rotary(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """x (b, t, h, d) rotated pairwise by table (t, d / 2)."""
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    rotated = torch.view_as_real(pairs * table[None, :, None, :]).flatten(3)
    return rotated.type_as(x)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(
            x
        ) * self.weight


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.wq = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(heads * self.head_dim, dim, bias=False)

    def repeat_kv(self, x: torch.Tensor) -> torch.Tensor:
        b, t, kv, d = x.shape
        rep = self.heads // kv
        return x[:, :, :, None, :].expand(b, t, kv, rep, d).reshape(b, t, kv * rep, d)

    def forward(self, x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.heads, self.head_dim)
        k = self.wk(x).view(b, t, self.kv_heads, self.head_dim)
        v = self.wv(x).view(b, t, self.kv_heads, self.head_dim)
        q, k = apply_rotary(q, table), apply_rotary(k, table)
        k, v = self.repeat_kv(k), self.repeat_kv(v)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        return self.wo(out.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(dim)
        self.attn = Attention(dim, heads, kv_heads)
        self.ffn_norm = RMSNorm(dim)
        self.ffn = FeedForward(dim, 2048)

    def forward(self, x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), table)
        return x + self.ffn(self.ffn_norm(x))


class RotaryLM(nn.Module):
    def __init__(self, dim: int = 768, depth: int = 12, heads: int = 12, kv_heads: int = 4):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, kv_heads) for _ in range(depth))
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, VOCAB, bias=False)
        self.register_buffer("table", rotary_table(dim // heads, 4096), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        table = self.table[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x, table)
        return self.output(self.norm(x))


def make_model() -> nn.Module:
    return RotaryLM()


def make_batch(batch_size: int, seq_len: int | None) -> torch.Tensor:
    seq_len = seq_len or DEFAULT_SEQ_LEN
    gen = torch.Generator().manual_seed(9206)
    return torch.randint(0, VOCAB, (batch_size, seq_len + 1), generator=gen)


def loss_fn(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    logits = model(batch[:, :-1])
    return F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten())
