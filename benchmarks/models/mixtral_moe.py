"""A Mixtral-style mixture-of-experts model (8 experts, top-2), 0.9B parameters, as user code:
``mixtral_moe.py:make_model``. Random weights route tokens roughly evenly, as memfit's
default (balanced) routing assumes."""

from __future__ import annotations

import torch
import transformers
from torch import nn

DEFAULT_SEQ_LEN = 1024


def make_model() -> nn.Module:
    config = transformers.MixtralConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=3584,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=8,
        num_local_experts=8,
        num_experts_per_tok=2,
        max_position_embeddings=4096,
    )
    return transformers.MixtralForCausalLM(config)


def make_batch(batch_size: int, seq_len: int | None) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 32000, (batch_size, seq_len or DEFAULT_SEQ_LEN))
    return {"input_ids": ids, "labels": ids}
