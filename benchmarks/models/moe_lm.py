"""A language model with hand-written mixture-of-experts MLPs, as user code:
``moe_lm.py:make_model``.

Top-2 routing with fixed capacity per expert, as in GShard: a softmax router, ``topk``,
``F.one_hot`` of the choices, each token's slot in its expert's buffer from a ``cumsum``,
tokens over capacity dropped, dispatch and combine tensors of fixed shape applied with
``einsum``; the experts' weights stacked in one parameter per layer and applied as batched
``einsum``; a load-balancing loss. Attention is ``scaled_dot_product_attention``, causal.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 32000
DEFAULT_SEQ_LEN = 1024
EXPERTS = 8
TOP_K = 2
CAPACITY_FACTOR = 1.25


class MoE(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.router = nn.Linear(dim, EXPERTS, bias=False)
        self.w1 = nn.Parameter(torch.randn(EXPERTS, dim, hidden) * dim**-0.5)
        self.b1 = nn.Parameter(torch.zeros(EXPERTS, 1, 1, hidden))
        self.w2 = nn.Parameter(torch.randn(EXPERTS, hidden, dim) * hidden**-0.5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(G, S, D) tokens in groups -> the same, and the load-balancing loss."""
        g, s, _ = x.shape
        cap = int(CAPACITY_FACTOR * s * TOP_K / EXPERTS)
        probs = self.router(x).float().softmax(-1)  # (G, S, E)
        gate, idx = probs.topk(TOP_K, dim=-1)  # (G, S, K)
        gate = gate / gate.sum(-1, keepdim=True)
        chosen = F.one_hot(idx, EXPERTS).float()  # (G, S, K, E)
        # slots: all first choices fill the buffers before any second choice
        order = chosen.transpose(1, 2).reshape(g, TOP_K * s, EXPERTS)
        pos = ((order.cumsum(1) - 1) * order).view(g, TOP_K, s, EXPERTS).transpose(1, 2)
        keep = chosen * (pos < cap)
        slot = F.one_hot((pos * keep).sum(-1).long(), cap).float()  # (G, S, K, C)
        combine = torch.einsum("gsk,gske,gskc->gsec", gate, keep, slot)
        dispatch = (combine > 0).to(x.dtype)
        expert_in = torch.einsum("gsec,gsd->egcd", dispatch, x)
        h = F.gelu(torch.einsum("egcd,edh->egch", expert_in, self.w1) + self.b1)
        expert_out = torch.einsum("egch,ehd->egcd", h, self.w2)
        out = torch.einsum("gsec,egcd->gsd", combine.to(expert_out.dtype), expert_out)
        balance = EXPERTS * (chosen[:, :, 0].mean(1) * probs.mean(1)).sum(-1).mean()
        return out, balance


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.moe = MoE(dim, hidden)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        out, balance = self.moe(self.norm2(x))
        return x + out, balance


class MoELM(nn.Module):
    def __init__(self, dim: int = 512, depth: int = 4, heads: int = 8, hidden: int = 2048):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        self.pos = nn.Parameter(torch.randn(DEFAULT_SEQ_LEN, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads, hidden) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, VOCAB, bias=False)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.embed(ids) + self.pos[: ids.shape[1]]
        balance = x.new_zeros(())
        for block in self.blocks:
            x, b = block(x)
            balance = balance + b
        return self.head(self.norm(x)), balance / len(self.blocks)


def make_model() -> nn.Module:
    return MoELM()


def make_batch(batch_size: int, seq_len: int | None) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch_size, (seq_len or DEFAULT_SEQ_LEN) + 1))


def loss_fn(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    logits, balance = model(batch[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten()) + 0.01 * balance
