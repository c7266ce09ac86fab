"""Greedy generation with a TinyLlama-style 1.1B model (dynamic KV cache), as user code:
``generate_llama.py:make_model``. ``min_new_tokens`` makes every sequence run the full
``NEW_TOKENS``, so that the GPU measures the same length memfit assumes (its upper bound)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from memfit.workload._models import resolve_model

DEFAULT_SEQ_LEN = 1024  # the prompt
NEW_TOKENS = 256


def make_model() -> nn.Module:
    return resolve_model("tinyllama-1.1b-intermediate-step-1431k-3t").build()


def make_batch(batch_size: int, seq_len: int | None) -> dict[str, torch.Tensor]:
    ids = torch.randint(3, 32000, (batch_size, seq_len or DEFAULT_SEQ_LEN))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def step(model: nn.Module, batch: dict[str, torch.Tensor]) -> Any:
    return model.generate(
        **batch, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False
    )
