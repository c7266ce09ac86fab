"""A Reformer-style language model with LSH attention and an adaptive softmax, as user code:
``lsh_attention_lm.py:make_model``.

Shared query-key attention by locality-sensitive hashing, written by hand: the normalised
keys are projected by a fresh random rotation (``einsum``), the bucket of each token is the
``argmax`` over the rotations and their negations, and the tokens of each head are sorted by
bucket and position (``argsort`` of a combined key) and gathered into that order. Chunks of
64 sorted tokens attend to themselves and to the previous chunk (``torch.roll``); the causal
mask compares the gathered original positions and a token is kept from attending to itself
unless nothing else is allowed (``masked_fill`` with a large negative). The outputs are
scattered back to the original order by the inverse permutation (``argsort`` of the sort).
Pre-norm blocks with a GELU MLP; the output is an ``nn.AdaptiveLogSoftmaxWithLoss`` over a
267,735-word vocabulary (a head of the 20,000 most frequent words and three tail clusters),
run in float32 with autocast turned off.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 267735
CUTOFFS = [20000, 60000, 200000]
DEFAULT_SEQ_LEN = 4096
CHUNK = 64


def gather_seq(x: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """x (b, h, t, d) reordered along t by order (b, h, t)."""
    return x.gather(2, order[..., None].expand(-1, -1, -1, x.shape[-1]))


def look_back(x: torch.Tensor) -> torch.Tensor:
    """(b, h, n, c, ...) -> (b, h, n, 2c, ...): each chunk joined with the one before it."""
    return torch.cat([x, torch.roll(x, 1, dims=2)], 3)


class LSHAttention(nn.Module):
    def __init__(self, dim: int, heads: int, buckets: int = 64) -> None:
        super().__init__()
        self.heads, self.buckets = heads, buckets
        self.qk = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, dim, bias=False)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h, dh = self.heads, d // self.heads
        qk = self.qk(x).view(b, t, h, dh).transpose(1, 2)
        v = self.v(x).view(b, t, h, dh).transpose(1, 2)
        with torch.no_grad():
            rotations = torch.randn(dh, self.buckets // 2, device=x.device, dtype=qk.dtype)
            rotated = torch.einsum("bhtd,dr->bhtr", F.normalize(qk, dim=-1), rotations)
            bucket = torch.cat([rotated, -rotated], -1).argmax(-1)  # (b, h, t)
            positions = torch.arange(t, device=x.device)
            order = (bucket * t + positions).argsort(-1)
            undo = order.argsort(-1)
        n = t // CHUNK
        sq = gather_seq(qk, order).view(b, h, n, CHUNK, dh)
        sv = gather_seq(v, order).view(b, h, n, CHUNK, dh)
        spos = order.view(b, h, n, CHUNK)
        keys = look_back(F.normalize(sq, dim=-1))
        values = look_back(sv)
        kpos = look_back(spos)
        scores = torch.einsum("bhnid,bhnjd->bhnij", sq, keys) * dh**-0.5
        qpos = spos[..., :, None]
        scores = scores.masked_fill(qpos < kpos[..., None, :], torch.finfo(scores.dtype).min)
        scores = scores.masked_fill(qpos == kpos[..., None, :], -1e4)
        att = scores.float().softmax(-1).type_as(values)
        out = torch.einsum("bhnij,bhnjd->bhnid", att, values).reshape(b, h, t, dh)
        out = gather_seq(out, undo)
        return self.out(out.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = LSHAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ReformerLM(nn.Module):
    def __init__(self, dim: int = 512, depth: int = 6, heads: int = 8) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, dim)
        self.pos = nn.Parameter(torch.zeros(1, 16384, dim))
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.softmax = nn.AdaptiveLogSoftmaxWithLoss(dim, VOCAB, CUTOFFS, div_value=4.0)

    def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids) + self.pos[:, : ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        hidden = self.norm(x).flatten(0, 1)
        # the adaptive softmax mixes its clusters' outputs in place: run it in float32
        with torch.autocast(hidden.device.type, enabled=False):
            return self.softmax(hidden.float(), targets.flatten()).loss


def make_model() -> nn.Module:
    return ReformerLM()


def make_batch(batch_size: int, seq_len: int | None) -> torch.Tensor:
    n = seq_len or DEFAULT_SEQ_LEN
    # word frequencies fall off (Zipf-like): most targets land in the head cluster
    ranks = (torch.rand(batch_size, n + 1) ** 4 * VOCAB).long().clamp(max=VOCAB - 1)
    return ranks


def loss_fn(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    return model(batch[:, :-1], batch[:, 1:])
