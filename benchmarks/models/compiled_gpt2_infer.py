"""GPT-2 medium inference (the logits of a whole sequence, no KV cache), compiled with
``torch.compile``: ``compiled_gpt2_infer.py:make_model`` (held out)."""

from __future__ import annotations

import torch
import transformers
from torch import nn

DEFAULT_SEQ_LEN = 1024


def make_model() -> nn.Module:
    config = transformers.GPT2Config(n_embd=1024, n_layer=24, n_head=16, use_cache=False)
    return torch.compile(transformers.GPT2LMHeadModel(config))  # type: ignore[return-value]


def make_batch(batch_size: int, seq_len: int | None) -> dict[str, torch.Tensor]:
    return {"input_ids": torch.randint(0, 50257, (batch_size, seq_len or DEFAULT_SEQ_LEN))}
