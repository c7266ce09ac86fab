"""Whisper-small (speech encoder-decoder), as user code: ``whisper_small.py:make_model``.

openai/whisper-small's architecture: 12 encoder and 12 decoder layers, 768 wide, 12 heads, over
30 s of 80-bin log-mel features (3,000 frames); ``seq_len`` is the length of the label text.
"""

from __future__ import annotations

import torch
import transformers
from torch import nn

DEFAULT_SEQ_LEN = 128
VOCAB = 51865


def make_model() -> nn.Module:
    config = transformers.WhisperConfig(
        vocab_size=VOCAB,
        num_mel_bins=80,
        d_model=768,
        encoder_layers=12,
        decoder_layers=12,
        encoder_attention_heads=12,
        decoder_attention_heads=12,
        encoder_ffn_dim=3072,
        decoder_ffn_dim=3072,
    )
    return transformers.WhisperForConditionalGeneration(config)


def make_batch(batch_size: int, seq_len: int | None) -> dict[str, torch.Tensor]:
    return {
        "input_features": torch.randn(batch_size, 80, 3000),
        "labels": torch.randint(0, VOCAB, (batch_size, seq_len or DEFAULT_SEQ_LEN)),
    }
