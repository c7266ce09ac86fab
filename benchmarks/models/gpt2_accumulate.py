"""GPT-2 (124M) trained with gradient accumulation, as user code: ``gpt2_accumulate.py:make_model``.

The batch is split into ``MICRO_BATCHES`` micro-batches; each runs forward under bf16 autocast
and backward (the gradients of the earlier ones are live while the later ones run), then the
gradients are clipped and AdamW steps once.
"""

from __future__ import annotations

from typing import Any

import torch
import transformers
from torch import nn

DEFAULT_SEQ_LEN = 1024
MICRO_BATCHES = 4


def make_model() -> nn.Module:
    return transformers.GPT2LMHeadModel(transformers.GPT2Config())


def make_batch(batch_size: int, seq_len: int | None) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 50257, (batch_size, seq_len or DEFAULT_SEQ_LEN))
    return {"input_ids": ids, "labels": ids}


def step(model: nn.Module, batch: dict[str, torch.Tensor], optimizer: Any) -> None:
    for part in zip(*(v.chunk(MICRO_BATCHES) for v in batch.values()), strict=True):
        micro = dict(zip(batch, part, strict=True))
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(**micro).loss / MICRO_BATCHES
        loss.backward()
        del loss
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
