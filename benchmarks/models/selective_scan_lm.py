"""A language model of state-space (Mamba-2 style) blocks in pure PyTorch, as user code:
``selective_scan_lm.py:make_model``.

No attention and no custom kernel: each block projects to a gate, the scan input and the
input-dependent ``B``, ``C`` and step size; a depthwise causal ``Conv1d`` (padded, then cut
to length); the selective scan computed by chunks as in the minimal SSD reference: log-decays
summed by ``cumsum``, the within-chunk decay matrix by a segment sum masked with ``tril`` and
``-inf`` then ``exp``, ``einsum`` of two operands at a time, and the state carried from chunk
to chunk by a Python loop. Gated RMSNorm, tied embeddings, next-token cross-entropy.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 32000
DEFAULT_SEQ_LEN = 2048
CHUNK = 64


class RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(
            x
        ) * self.weight


def segsum(x: torch.Tensor) -> torch.Tensor:
    """(..., T) -> (..., T, T): the sum of x over (j, i] at [i, j], -inf above the diagonal."""
    t = x.shape[-1]
    x = x[..., None].expand(*x.shape, t)
    below = torch.tril(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=-1)
    x = x.masked_fill(~below, 0)
    sums = torch.cumsum(x, dim=-2)
    keep = torch.tril(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=0)
    return sums.masked_fill(~keep, float("-inf"))


def ssd(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """x (B, T, H, P), a (B, T, H) log-decays, b and c (B, T, N) -> y (B, T, H, P)."""
    bsz, t, h, p = x.shape
    n = b.shape[-1]
    k = t // CHUNK
    x = x.reshape(bsz, k, CHUNK, h, p)
    b = b.reshape(bsz, k, CHUNK, n)
    c = c.reshape(bsz, k, CHUNK, n)
    a = a.reshape(bsz, k, CHUNK, h).permute(0, 3, 1, 2)  # (B, H, K, L)
    a_cum = torch.cumsum(a, dim=-1)

    # within each chunk: y_l = sum_{s <= l} (c_l . b_s) exp(a_cum_l - a_cum_s) x_s
    decay = torch.exp(segsum(a))  # (B, H, K, L, L)
    cb = torch.einsum("bkln,bksn->bkls", c, b)  # (B, K, L, L)
    weights = cb[:, None] * decay  # (B, H, K, L, L)
    y_diag = torch.einsum("bhkls,bkshp->bklhp", weights, x)

    # each chunk's final state, from its own inputs
    to_end = torch.exp(a_cum[..., -1:] - a_cum)  # (B, H, K, L)
    xw = x * to_end.permute(0, 2, 3, 1)[..., None]  # (B, K, L, H, P)
    chunk_states = torch.einsum("bkln,bklhp->bkhpn", b, xw)

    # carry the state across chunks
    chunk_decay = torch.exp(a_cum[..., -1])  # (B, H, K)
    state = x.new_zeros(bsz, h, p, n, dtype=torch.float32)
    entering = []
    for i in range(k):
        entering.append(state)
        state = state * chunk_decay[:, :, i, None, None] + chunk_states[:, i]
    states = torch.stack(entering, 1)  # (B, K, H, P, N)

    # the state entering each chunk, read out by c and decayed to each position
    y_off = torch.einsum("bkln,bkhpn->bklhp", c, states)
    y_off = y_off * torch.exp(a_cum).permute(0, 2, 3, 1)[..., None]
    return (y_diag + y_off).reshape(bsz, t, h, p)


class SSDBlock(nn.Module):
    def __init__(self, dim: int, expand: int = 2, head_dim: int = 64, state: int = 128) -> None:
        super().__init__()
        inner = expand * dim
        self.inner, self.state, self.head_dim = inner, state, head_dim
        self.heads = inner // head_dim
        conv_dim = inner + 2 * state
        self.norm = RMSNorm(dim)
        self.in_proj = nn.Linear(dim, inner + conv_dim + self.heads, bias=False)
        self.conv = nn.Conv1d(conv_dim, conv_dim, 4, groups=conv_dim, padding=3)
        self.dt_bias = nn.Parameter(torch.rand(self.heads) * 0.1)
        self.a_log = nn.Parameter(torch.log(torch.linspace(1.0, 16.0, self.heads)))
        self.d = nn.Parameter(torch.ones(self.heads))
        self.out_norm = RMSNorm(inner)
        self.out_proj = nn.Linear(inner, dim, bias=False)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        bsz, t, _ = u.shape
        z, xbc, dt = self.in_proj(self.norm(u)).split(
            [self.inner, self.inner + 2 * self.state, self.heads], dim=-1
        )
        xbc = F.silu(self.conv(xbc.transpose(1, 2))[..., :t].transpose(1, 2))
        x, b, c = xbc.split([self.inner, self.state, self.state], dim=-1)
        dt = F.softplus(dt.float() + self.dt_bias)  # (B, T, H)
        a = -torch.exp(self.a_log.float())
        x = x.reshape(bsz, t, self.heads, self.head_dim)
        y = ssd(x * dt[..., None].to(x.dtype), a * dt, b, c)
        y = y + x * self.d[:, None].to(x.dtype)
        y = self.out_norm(y.reshape(bsz, t, self.inner) * F.silu(z))
        return u + self.out_proj(y)


class SSDLM(nn.Module):
    def __init__(self, dim: int = 768, depth: int = 12) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.blocks = nn.ModuleList(SSDBlock(dim) for _ in range(depth))
        self.norm = RMSNorm(dim)
        self.head = nn.Linear(dim, VOCAB, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def make_model() -> nn.Module:
    return SSDLM()


def make_batch(batch_size: int, seq_len: int | None) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch_size, (seq_len or DEFAULT_SEQ_LEN) + 1))


def loss_fn(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    logits = model(batch[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten())
