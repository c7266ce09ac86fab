"""A Llama-style model (TinyLlama's widths, 12 layers: 0.6B parameters) compiled with
``torch.compile`` and trained: ``compiled_llama.py:make_model`` (held out)."""

from __future__ import annotations

import torch
import transformers
from torch import nn

DEFAULT_SEQ_LEN = 1024


def make_model() -> nn.Module:
    config = transformers.LlamaConfig(
        vocab_size=32000,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=12,
        num_attention_heads=32,
        num_key_value_heads=4,
        use_cache=False,  # training: no KV cache
    )
    model = transformers.LlamaForCausalLM(config)
    model.loss_type = "ForCausalLM"  # else transformers logs once, a graph break
    return torch.compile(model)  # type: ignore[return-value]


def make_batch(batch_size: int, seq_len: int | None) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 32000, (batch_size, seq_len or DEFAULT_SEQ_LEN))
    return {"input_ids": ids, "labels": ids}
