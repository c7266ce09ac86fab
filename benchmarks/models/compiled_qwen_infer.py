"""A Qwen2.5-0.5B-style model compiled with ``torch.compile`` for inference (one forward, no
KV cache): ``compiled_qwen_infer.py:make_model`` (held out)."""

from __future__ import annotations

import torch
import transformers
from torch import nn

DEFAULT_SEQ_LEN = 1024


def make_model() -> nn.Module:
    config = transformers.Qwen2Config(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        use_cache=False,
    )
    return torch.compile(transformers.Qwen2ForCausalLM(config))  # type: ignore[return-value]


def make_batch(batch_size: int, seq_len: int | None) -> dict[str, torch.Tensor]:
    return {"input_ids": torch.randint(0, 151936, (batch_size, seq_len or DEFAULT_SEQ_LEN))}
