"""The small model the apply tests train on the CPU: a two-layer GPT-2 without dropout, so that
two ways of running the same step give the same parameters."""

from __future__ import annotations

import pytest
import torch
from torch import nn


def gpt2() -> nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2,
        n_embd=64,
        n_head=2,
        vocab_size=128,
        bos_token_id=0,
        eos_token_id=0,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return transformers.GPT2LMHeadModel(config)
