"""BERT-base masked-language-model training, compiled with ``torch.compile``:
``compiled_bert.py:make_model`` (held out)."""

from __future__ import annotations

import torch
import transformers
from torch import nn

DEFAULT_SEQ_LEN = 512


def make_model() -> nn.Module:
    model = transformers.BertForMaskedLM(transformers.BertConfig())
    model.loss_type = "ForMaskedLM"  # else transformers logs once, a graph break
    return torch.compile(model)  # type: ignore[return-value]


def make_batch(batch_size: int, seq_len: int | None) -> dict[str, torch.Tensor]:
    ids = torch.randint(1000, 30000, (batch_size, seq_len or DEFAULT_SEQ_LEN))
    return {"input_ids": ids, "labels": ids}
