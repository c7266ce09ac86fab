"""A click-through-rate model with a factorization machine, a cross network and a deep MLP,
as user code: ``deepfm_cross.py:make_model``.

26 categorical fields share one ``nn.Embedding`` (each field's ids shifted by its offset, a
buffer); first-order weights from a second one-wide ``nn.Embedding``; pairwise interactions
of the field vectors by ``torch.einsum`` (their upper triangle picked by ``triu_indices``);
the factorization machine's ``(sum v)^2 - sum v^2``; DCN-v2 cross layers
``x0 * (W x + b) + x``; binary cross-entropy with logits.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

FIELDS = 26
FIELD_ROWS = (200_000, 50_000, 100_000, 20_000, 5_000) * 5 + (1_000,)
DENSE = 13
DIM = 32


class DeepCrossFM(nn.Module):
    def __init__(self, cross_layers: int = 3, hidden: int = 1024) -> None:
        super().__init__()
        rows = torch.tensor(FIELD_ROWS)
        self.register_buffer("offsets", torch.cat([rows.new_zeros(1), rows.cumsum(0)[:-1]]), False)
        self.embed = nn.Embedding(int(rows.sum()), DIM)
        self.linear = nn.Embedding(int(rows.sum()), 1)
        nn.init.normal_(self.embed.weight, std=0.01)
        nn.init.zeros_(self.linear.weight)
        self.dense = nn.Linear(DENSE, DIM)
        pairs = torch.triu_indices(FIELDS + 1, FIELDS + 1, 1)
        self.register_buffer("pair_rows", pairs[0], False)
        self.register_buffer("pair_cols", pairs[1], False)
        width = (FIELDS + 1) * DIM
        self.cross = nn.ModuleList(nn.Linear(width, width) for _ in range(cross_layers))
        self.deep = nn.Sequential(
            nn.Linear(width + pairs.shape[1], hidden),
            nn.BatchNorm1d(hidden),
            nn.ReLU(),
            nn.Dropout(0.2),
            nn.Linear(hidden, hidden // 2),
            nn.BatchNorm1d(hidden // 2),
            nn.ReLU(),
            nn.Dropout(0.2),
        )
        self.out = nn.Linear(hidden // 2 + width, 1)

    def forward(self, ids: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        """(B, FIELDS) ids within each field, (B, DENSE) features -> (B,) logits."""
        flat = ids + self.offsets
        v = torch.cat([self.dense(dense).unsqueeze(1), self.embed(flat)], 1)  # (B, F+1, D)
        first = self.linear(flat).sum((1, 2))
        fm = 0.5 * (v.sum(1).pow(2) - v.pow(2).sum(1)).sum(1)
        inter = torch.einsum("bfd,bgd->bfg", v, v)[:, self.pair_rows, self.pair_cols]
        x0 = v.flatten(1)
        x = x0
        for layer in self.cross:
            x = x0 * layer(x) + x
        deep = self.deep(torch.cat([x0, inter], 1))
        return self.out(torch.cat([deep, x], 1)).squeeze(1) + first + fm


def make_model() -> nn.Module:
    return DeepCrossFM()


def make_batch(batch_size: int, seq_len: int | None) -> dict[str, torch.Tensor]:
    rows = torch.tensor(FIELD_ROWS)
    ids = (torch.rand(batch_size, FIELDS) ** 3 * rows).long()  # popular ids more often
    return {
        "ids": ids,
        "dense": torch.log1p(torch.rand(batch_size, DENSE) * 100),
        "y": torch.randint(0, 2, (batch_size,)).float(),
    }


def loss_fn(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(model(batch["ids"], batch["dense"]), batch["y"])
