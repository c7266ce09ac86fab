"""A bidirectional GRU over padded sequences of varied lengths, packed, as user code:
``packed_gru.py:make_model``: ``pack_padded_sequence`` and ``pad_packed_sequence`` around
the GRU, masked mean pooling, a classifier."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

VOCAB = 30000
CLASSES = 20
DEFAULT_SEQ_LEN = 512


class PackedGRU(nn.Module):
    def __init__(self, dim: int = 512, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim, padding_idx=0)
        self.gru = nn.GRU(dim, dim, layers, batch_first=True, bidirectional=True, dropout=0.1)
        self.head = nn.Linear(2 * dim, CLASSES)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        packed = pack_padded_sequence(
            self.embed(ids), lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        out, _ = self.gru(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=ids.shape[1])
        mask = (torch.arange(ids.shape[1], device=ids.device) < lengths[:, None]).unsqueeze(-1)
        pooled = (out * mask).sum(1) / lengths[:, None].to(out.dtype)
        return self.head(pooled)


def make_model() -> nn.Module:
    return PackedGRU()


def make_batch(batch_size: int, seq_len: int | None) -> dict[str, torch.Tensor]:
    n = seq_len or DEFAULT_SEQ_LEN
    lengths = torch.randint(n // 4, n + 1, (batch_size,))
    lengths[0] = n
    ids = torch.randint(1, VOCAB, (batch_size, n))
    ids[torch.arange(n)[None, :] >= lengths[:, None]] = 0
    return {"ids": ids, "lengths": lengths, "y": torch.randint(0, CLASSES, (batch_size,))}


def loss_fn(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return F.cross_entropy(model(batch["ids"], batch["lengths"]), batch["y"])
