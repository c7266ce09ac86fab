"""A Transformer translation model built from PyTorch's own layers, as user code:
``transformer_translator.py:make_model``.

An ``nn.TransformerEncoder`` and an ``nn.TransformerDecoder`` (six pre-norm layers each,
``batch_first``, d_model 512, 8 heads, GELU feed-forward of 2,048) over a shared 32,000-token
vocabulary; the embedding (initialised with std d_model^-0.5) is scaled by sqrt(d_model),
sinusoidal positions are added from a buffer, and the output projection is tied to the
embedding. The batch holds sentences of varied lengths padded at the end: the encoder gets
``src_key_padding_mask``, the decoder a causal ``tgt_mask`` from
``nn.Transformer.generate_square_subsequent_mask`` together with ``tgt_key_padding_mask`` and
``memory_key_padding_mask``. Teacher forcing (the target shifted right behind a start token);
cross-entropy with label smoothing 0.1 that ignores padding.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 32000
PAD, BOS = 0, 1
DEFAULT_SEQ_LEN = 128
MAX_LEN = 1024


def sinusoids(length: int, dim: int) -> torch.Tensor:
    position = torch.arange(length, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(position * freq)
    table[:, 1::2] = torch.cos(position * freq)
    return table


class Translator(nn.Module):
    def __init__(self, dim: int = 512, heads: int = 8, layers: int = 6) -> None:
        super().__init__()
        self.dim = dim
        self.embed = nn.Embedding(VOCAB, dim, padding_idx=PAD)
        nn.init.normal_(self.embed.weight, std=dim**-0.5)
        self.register_buffer("positions", sinusoids(MAX_LEN, dim), persistent=False)
        enc_layer = nn.TransformerEncoderLayer(
            dim, heads, 4 * dim, dropout=0.1, activation="gelu", batch_first=True, norm_first=True
        )
        dec_layer = nn.TransformerDecoderLayer(
            dim, heads, 4 * dim, dropout=0.1, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(
            enc_layer, layers, norm=nn.LayerNorm(dim), enable_nested_tensor=False
        )
        self.decoder = nn.TransformerDecoder(dec_layer, layers, norm=nn.LayerNorm(dim))
        self.dropout = nn.Dropout(0.1)

    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) * math.sqrt(self.dim) + self.positions[: tokens.shape[1]]
        return self.dropout(x)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        src_pad = src == PAD
        tgt_pad = tgt_in == PAD
        causal = nn.Transformer.generate_square_subsequent_mask(
            tgt_in.shape[1], device=tgt_in.device
        )
        memory = self.encoder(self.embed_tokens(src), src_key_padding_mask=src_pad)
        out = self.decoder(
            self.embed_tokens(tgt_in),
            memory,
            tgt_mask=causal,
            tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=src_pad,
        )
        return F.linear(out, self.embed.weight)


def padded_tokens(gen: torch.Generator, batch_size: int, seq_len: int) -> torch.Tensor:
    tokens = torch.randint(2, VOCAB, (batch_size, seq_len), generator=gen)
    lengths = torch.randint(seq_len // 4, seq_len + 1, (batch_size,), generator=gen)
    lengths[0] = seq_len
    return tokens.masked_fill(torch.arange(seq_len)[None] >= lengths[:, None], PAD)


def make_model() -> nn.Module:
    return Translator()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    seq_len = seq_len or DEFAULT_SEQ_LEN
    gen = torch.Generator().manual_seed(4206)
    return padded_tokens(gen, batch_size, seq_len), padded_tokens(gen, batch_size, seq_len)


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    src, tgt = batch
    bos = torch.full_like(tgt[:, :1], BOS)
    tgt_in = torch.cat([bos, tgt[:, :-1]], 1)
    logits = model(src, tgt_in)
    return F.cross_entropy(
        logits.float().flatten(0, 1), tgt.flatten(), ignore_index=PAD, label_smoothing=0.1
    )
