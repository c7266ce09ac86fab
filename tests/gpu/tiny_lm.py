"""A torch-only language model for the multi-rank GPU tests (no transformers needed there)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


class TinyLM(torch.nn.Module):
    def __init__(self, vocab: int, layers: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.vocab = vocab
        self.embed = torch.nn.Embedding(vocab, 512)
        layer = torch.nn.TransformerEncoderLayer(
            512, 8, dim_feedforward=2048, dropout=0.0, batch_first=True
        )
        self.body = torch.nn.TransformerEncoder(
            layer, num_layers=layers, enable_nested_tensor=False
        )
        self.head = torch.nn.Linear(512, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.embed(ids)))


def next_token_loss(model: torch.nn.Module, ids: torch.Tensor, vocab: int) -> torch.Tensor:
    logits = model(ids[:, :-1])
    return F.cross_entropy(logits.reshape(-1, vocab), ids[:, 1:].reshape(-1))
