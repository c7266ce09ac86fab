"""CLIP ViT-B/32 (two towers, contrastive loss), as user code: ``clip_vit_b32.py:make_model``.

transformers' default ``CLIPConfig`` is openai/clip-vit-base-patch32's architecture: a 12-layer,
512-wide text tower over 77 tokens and a 12-layer, 768-wide ViT-B/32 image tower.
"""

from __future__ import annotations

from typing import Any

import torch
import transformers
from torch import nn

DEFAULT_SEQ_LEN = 77


def make_model() -> nn.Module:
    return transformers.CLIPModel(transformers.CLIPConfig())


def make_batch(batch_size: int, seq_len: int | None) -> dict[str, torch.Tensor]:
    length = seq_len or DEFAULT_SEQ_LEN
    return {
        "input_ids": torch.randint(0, 49408, (batch_size, length)),
        "attention_mask": torch.ones(batch_size, length, dtype=torch.long),
        "pixel_values": torch.randn(batch_size, 3, 224, 224),
    }


def loss_fn(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    return model(**batch, return_loss=True).loss  # type: ignore[no-any-return]
