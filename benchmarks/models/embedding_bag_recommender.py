"""A DLRM-style recommender, as user code: ``embedding_bag_recommender.py:make_model``:
``EmbeddingBag`` tables (sum over a varied number of ids per sample, given by offsets), a
dense MLP, pairwise feature interactions by ``bmm`` and their upper triangle, a top MLP,
binary cross-entropy with logits."""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import nn

TABLES = 8
ROWS = 200_000
DIM = 64
DENSE = 13
IDS_PER_SAMPLE = 20


def _mlp(*sizes: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in itertools.pairwise(sizes):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


class DLRM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tables = nn.ModuleList(nn.EmbeddingBag(ROWS, DIM, mode="sum") for _ in range(TABLES))
        self.bottom = _mlp(DENSE, 512, 256, DIM)
        pairs = (TABLES + 1) * TABLES // 2
        self.top = _mlp(DIM + pairs, 1024, 512, 1)
        rows, cols = torch.triu_indices(TABLES + 1, TABLES + 1, 1)
        self.register_buffer("rows", rows, False)
        self.register_buffer("cols", cols, False)

    def forward(self, dense: torch.Tensor, ids: torch.Tensor, offsets: torch.Tensor):
        d = self.bottom(dense)
        sparse = [table(ids[i], offsets[i]) for i, table in enumerate(self.tables)]
        feats = torch.stack([d, *sparse], 1)  # (B, T+1, D)
        inter = torch.bmm(feats, feats.transpose(1, 2))[:, self.rows, self.cols]
        return self.top(torch.cat([d, inter], 1)).squeeze(1)


def make_model() -> nn.Module:
    return DLRM()


def make_batch(batch_size: int, seq_len: int | None) -> dict[str, torch.Tensor]:
    counts = torch.randint(1, 2 * IDS_PER_SAMPLE, (TABLES, batch_size))
    offsets = torch.cat([torch.zeros(TABLES, 1, dtype=torch.long), counts.cumsum(1)[:, :-1]], 1)
    total = int(counts.sum(1).max())
    return {
        "dense": torch.randn(batch_size, DENSE),
        "ids": torch.randint(0, ROWS, (TABLES, total)),
        "offsets": offsets,
        "y": torch.randint(0, 2, (batch_size,)).float(),
    }


def loss_fn(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    logits = model(batch["dense"], batch["ids"], batch["offsets"])
    return F.binary_cross_entropy_with_logits(logits, batch["y"])
