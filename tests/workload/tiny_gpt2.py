"""A GPT-2 small enough for the data-parallel tests, built from a config, and its batches."""

from __future__ import annotations

import torch
from torch import nn


def tiny_gpt2(n_layer: int = 2, n_embd: int = 128, n_positions: int = 256) -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(
        GPT2Config(
            n_layer=n_layer, n_embd=n_embd, n_head=4, vocab_size=1000, n_positions=n_positions
        )
    )


def token_batch(batch: int = 4, seq: int = 256) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 1000, (batch, seq))
    return {"input_ids": ids, "labels": ids}
