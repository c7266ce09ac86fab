"""A 2-layer LSTM language model, as user code: ``benchmarks/models/lstm_lm.py:make_model``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 32000
DEFAULT_SEQ_LEN = 256


class LSTMLanguageModel(nn.Module):
    def __init__(self, vocab: int = VOCAB, dim: int = 1024, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, dim, num_layers=layers, batch_first=True)
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.lstm(self.embed(ids))
        return self.head(hidden)


def make_model() -> nn.Module:
    return LSTMLanguageModel()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, VOCAB, (batch_size, (seq_len or DEFAULT_SEQ_LEN) + 1))
    return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    inputs, targets = batch
    logits = model(inputs)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())
