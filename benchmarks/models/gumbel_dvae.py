"""A discrete VAE with a Gumbel-softmax relaxation (DALL-E style tokenizer), as user code:
``gumbel_dvae.py:make_model``.

Images cut into 8x8 patches by ``reshape`` and ``permute``; an MLP-Mixer encoder (token mixing
by linear layers across the patch axis after a ``transpose``, channel mixing per patch) gives
logits over an 8,192-entry codebook for every patch; a relaxed one-hot sample is drawn with
``F.gumbel_softmax`` (annealed temperature, soft) and the codebook vectors mixed by it with
``einsum``. A Mixer decoder predicts each patch's 192 pixel values, laid out as channels and
put back into the image by ``F.pixel_shuffle``. The loss is the mean squared reconstruction
error plus the KL divergence of the code distribution (``log_softmax``) from the uniform one.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

SIZE = 256
PATCH = 8
CODES = 8192
TOKENS = (SIZE // PATCH) ** 2


class MixerBlock(nn.Module):
    def __init__(self, dim: int, tokens: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.token_mix = nn.Sequential(nn.Linear(tokens, 512), nn.GELU(), nn.Linear(512, tokens))
        self.norm2 = nn.LayerNorm(dim)
        self.channel_mix = nn.Sequential(
            nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.token_mix(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mix(self.norm2(x))


class GumbelDVAE(nn.Module):
    def __init__(self, dim: int = 384, depth: int = 4, code_dim: int = 256) -> None:
        super().__init__()
        self.patch_in = nn.Linear(3 * PATCH * PATCH, dim)
        self.encoder = nn.Sequential(*(MixerBlock(dim, TOKENS) for _ in range(depth)))
        self.to_logits = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, CODES))
        self.codebook = nn.Parameter(torch.randn(CODES, code_dim))
        self.code_in = nn.Linear(code_dim, dim)
        self.decoder = nn.Sequential(*(MixerBlock(dim, TOKENS) for _ in range(depth)))
        self.patch_out = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 3 * PATCH * PATCH))
        self.register_buffer("tau", torch.tensor(1.0))

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b = images.shape[0]
        g = SIZE // PATCH
        patches = images.reshape(b, 3, g, PATCH, g, PATCH).permute(0, 2, 4, 1, 3, 5)
        x = self.patch_in(patches.reshape(b, TOKENS, -1))
        logits = self.to_logits(self.encoder(x))  # (b, tokens, codes)
        soft = F.gumbel_softmax(logits.float(), tau=float(self.tau), hard=False, dim=-1)
        z = torch.einsum("bnk,kd->bnd", soft.type_as(logits), self.codebook.type_as(logits))
        y = self.patch_out(self.decoder(self.code_in(z)))  # (b, tokens, 3 * p * p)
        y = y.transpose(1, 2).reshape(b, 3 * PATCH * PATCH, g, g)
        # pixel_shuffle wants channel c*p*p + i*p + j: the patch layout above is (c, i, j)
        return F.pixel_shuffle(y, PATCH), logits


def make_model() -> nn.Module:
    return GumbelDVAE()


def make_batch(batch_size: int, seq_len: int | None) -> torch.Tensor:
    return torch.rand(batch_size, 3, SIZE, SIZE) * 2 - 1


def loss_fn(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    recon, logits = model(batch)
    log_q = F.log_softmax(logits.float(), -1)
    kl = (log_q.exp() * (log_q + math.log(CODES))).sum(-1).mean()
    return F.mse_loss(recon.float(), batch) + 1e-3 * kl
