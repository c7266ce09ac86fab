"""A tiny GPT-2 (2 layers of width 64) compiled with ``torch.compile`` and trained: its GPU work
is negligible, so its step's seconds are the host's issuing of inductor's wrappers (the host
cost per op of a compiled step)."""

from __future__ import annotations

import torch
import transformers
from torch import nn

DEFAULT_SEQ_LEN = 64


def make_model() -> nn.Module:
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=2, vocab_size=512, n_positions=64, use_cache=False
    )
    model = transformers.GPT2LMHeadModel(config)
    model.loss_type = "ForCausalLM"  # else transformers logs once, a graph break
    return torch.compile(model)  # type: ignore[return-value]


def make_batch(batch_size: int, seq_len: int | None) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 512, (batch_size, seq_len or DEFAULT_SEQ_LEN))
    return {"input_ids": ids, "labels": ids}
