"""A transformer language model with a product-key memory layer, as user code:
``product_key_lm.py:make_model``.

Pre-norm decoder blocks (causal ``scaled_dot_product_attention``, GELU MLP); in the middle
one the MLP is replaced by a product-key memory: a query network (``Linear`` then
``BatchNorm1d`` over all tokens) split per head into two halves, each scored against its own
512 sub-keys (``einsum``) and cut to its ``topk``; the 32 x 32 candidate sums (broadcast
add) cut to a ``topk`` again, their indices into the 262,144 slots recovered by ``gather``
from the sub-key indices, softmax weights over them, and the value rows looked up by
``F.embedding`` from the memory's table (all heads share it) and summed by weight. Untied
output head; next-token cross-entropy.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 32000
DEFAULT_SEQ_LEN = 1024


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class MLP(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class ProductKeyMemory(nn.Module):
    def __init__(
        self, dim: int, heads: int = 4, key_dim: int = 256, n_keys: int = 512, knn: int = 32
    ) -> None:
        super().__init__()
        self.heads, self.key_dim, self.n_keys, self.knn = heads, key_dim, n_keys, knn
        self.query = nn.Sequential(nn.Linear(dim, heads * key_dim), nn.BatchNorm1d(heads * key_dim))
        half = key_dim // 2
        self.keys = nn.Parameter(torch.randn(heads, 2, n_keys, half) * half**-0.5)
        self.values = nn.Embedding(n_keys * n_keys, dim)
        nn.init.normal_(self.values.weight, std=dim**-0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q = self.query(x.reshape(-1, d))  # (N, heads * key_dim)
        q = q.view(-1, self.heads, 2, self.key_dim // 2)
        s1 = torch.einsum("nhd,hkd->nhk", q[:, :, 0], self.keys[:, 0])
        s2 = torch.einsum("nhd,hkd->nhk", q[:, :, 1], self.keys[:, 1])
        s1, i1 = s1.topk(self.knn, dim=-1)  # (N, heads, knn)
        s2, i2 = s2.topk(self.knn, dim=-1)
        all_scores = (s1[..., :, None] + s2[..., None, :]).flatten(-2)  # (N, heads, knn^2)
        all_ids = (i1[..., :, None] * self.n_keys + i2[..., None, :]).flatten(-2)
        scores, best = all_scores.topk(self.knn, dim=-1)
        ids = all_ids.gather(-1, best)  # (N, heads, knn)
        weights = scores.float().softmax(-1).type_as(scores)
        rows = F.embedding(ids, self.values.weight)  # (N, heads, knn, dim)
        out = (weights[..., None] * rows).sum((1, 2))
        return out.view(b, t, d)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, memory: bool) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.ff: nn.Module = ProductKeyMemory(dim) if memory else MLP(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.ff(self.norm2(x))


class PKMLanguageModel(nn.Module):
    def __init__(
        self, dim: int = 768, depth: int = 12, heads: int = 12, memory_at: tuple[int, ...] = (6,)
    ) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, dim)
        self.pos = nn.Parameter(torch.zeros(1, 4096, dim))
        self.blocks = nn.ModuleList(Block(dim, heads, i in memory_at) for i in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, VOCAB, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids) + self.pos[:, : ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def make_model() -> nn.Module:
    return PKMLanguageModel()


def make_batch(batch_size: int, seq_len: int | None) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch_size, (seq_len or DEFAULT_SEQ_LEN) + 1))


def loss_fn(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    logits = model(batch[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten())
