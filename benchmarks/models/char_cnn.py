"""A character-level CNN text classifier, as user code: ``char_cnn.py:make_model``.

Byte ids through ``nn.Embedding``; a stack of ``Conv1d`` with max pooling; then parallel
``Conv1d`` of widths 3, 5, 7 and 9 whose outputs ``F.adaptive_max_pool1d`` reduces to a few
positions each; concatenated, dropout, an MLP classifier.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 256
CLASSES = 14
DEFAULT_SEQ_LEN = 2048
WIDTHS = (3, 5, 7, 9)
POOLED = 4


class CharCNN(nn.Module):
    def __init__(self, dim: int = 64, channels: int = 256) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim, padding_idx=0)
        self.stem = nn.Sequential(
            nn.Conv1d(dim, channels, 7, padding=3),
            nn.BatchNorm1d(channels),
            nn.ReLU(),
            nn.MaxPool1d(3),
            nn.Conv1d(channels, channels, 7, padding=3),
            nn.BatchNorm1d(channels),
            nn.ReLU(),
            nn.MaxPool1d(3),
        )
        self.branches = nn.ModuleList(
            nn.Conv1d(channels, channels, w, padding=w // 2) for w in WIDTHS
        )
        self.drop = nn.Dropout(0.5)
        features = channels * len(WIDTHS) * POOLED
        self.head = nn.Sequential(
            nn.Linear(features, 1024), nn.ReLU(), nn.Dropout(0.5), nn.Linear(1024, CLASSES)
        )

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.stem(self.embed(ids).transpose(1, 2))  # (B, C, T / 9)
        pooled = [F.adaptive_max_pool1d(F.relu(conv(x)), POOLED) for conv in self.branches]
        return self.head(self.drop(torch.cat(pooled, 1).flatten(1)))


def make_model() -> nn.Module:
    return CharCNN()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    n = seq_len or DEFAULT_SEQ_LEN
    ids = torch.randint(32, 127, (batch_size, n))
    ids[:, n // 2 + int(torch.randint(0, n // 2, ())) :] = 0  # zero padding at the end
    return ids, torch.randint(0, CLASSES, (batch_size,))


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    ids, y = batch
    return F.cross_entropy(model(ids), y)
