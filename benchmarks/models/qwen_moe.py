"""A Qwen2-MoE-style model (16 routed experts, top-4, plus a shared expert), as user code:
``qwen_moe.py:make_model``."""

from __future__ import annotations

import torch
import transformers
from torch import nn

DEFAULT_SEQ_LEN = 1024


def make_model() -> nn.Module:
    config = transformers.Qwen2MoeConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        moe_intermediate_size=704,
        shared_expert_intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=16,
        num_experts=16,
        num_experts_per_tok=4,
        max_position_embeddings=4096,
    )
    return transformers.Qwen2MoeForCausalLM(config)


def make_batch(batch_size: int, seq_len: int | None) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 32000, (batch_size, seq_len or DEFAULT_SEQ_LEN))
    return {"input_ids": ids, "labels": ids}
