"""GPT-2 (124M) compiled with ``torch.compile`` and trained: ``compiled_gpt2.py:make_model``
(the compiled example the compiled trace was developed against, not held out)."""

from __future__ import annotations

import torch
import transformers
from torch import nn

DEFAULT_SEQ_LEN = 1024


def make_model() -> nn.Module:
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(use_cache=False))
    model.loss_type = "ForCausalLM"  # else transformers logs once, a graph break
    return torch.compile(model)  # type: ignore[return-value]


def make_batch(batch_size: int, seq_len: int | None) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 50257, (batch_size, seq_len or DEFAULT_SEQ_LEN))
    return {"input_ids": ids, "labels": ids}
