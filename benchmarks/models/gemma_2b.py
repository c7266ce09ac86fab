"""A Gemma-style 2B causal LM built from its config (no weights downloaded), as user code:
``gemma_2b.py:make_model``. Gemma's shapes: a 256k vocabulary, multi-query attention (one
key/value head), GeGLU MLP, embeddings scaled and tied to the output layer."""

from __future__ import annotations

import torch
import transformers
from torch import nn

DEFAULT_SEQ_LEN = 1024
VOCAB = 256000


def make_model() -> nn.Module:
    config = transformers.GemmaConfig(
        vocab_size=VOCAB,
        hidden_size=2048,
        intermediate_size=16384,
        num_hidden_layers=18,
        num_attention_heads=8,
        num_key_value_heads=1,
        head_dim=256,
        max_position_embeddings=8192,
    )
    return transformers.GemmaForCausalLM(config)


def make_batch(batch_size: int, seq_len: int | None) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, VOCAB, (batch_size, seq_len or DEFAULT_SEQ_LEN))
    return {"input_ids": ids, "labels": ids.clone()}
