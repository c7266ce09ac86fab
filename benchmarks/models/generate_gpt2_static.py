"""Greedy generation with GPT-2 medium and a static KV cache, as user code:
``generate_gpt2_static.py:make_model``; every sequence runs ``NEW_TOKENS`` new tokens, uncompiled
(``disable_compile``), as memfit traces it."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from memfit.workload._models import resolve_model

DEFAULT_SEQ_LEN = 512  # the prompt
NEW_TOKENS = 256


def make_model() -> nn.Module:
    return resolve_model("gpt2-medium").build()


def make_batch(batch_size: int, seq_len: int | None) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 50000, (batch_size, seq_len or DEFAULT_SEQ_LEN))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def step(model: nn.Module, batch: dict[str, torch.Tensor]) -> Any:
    return model.generate(
        **batch,
        max_new_tokens=NEW_TOKENS,
        min_new_tokens=NEW_TOKENS,
        do_sample=False,
        cache_implementation="static",
        disable_compile=True,  # transformers compiles static-cache decoding on a GPU otherwise
        pad_token_id=50256,
    )
