"""A conditional variational autoencoder on flattened images, as user code:
``conditional_vae.py:make_model``.

Fully connected encoder and decoder with ``LayerNorm`` and GELU, a class embedding fed to
both; the encoder gives a mean and a log-variance, the latent is drawn by the
reparameterisation ``mu + exp(logvar / 2) * randn_like``; the loss is the Bernoulli
reconstruction (binary cross-entropy with logits, summed per image) plus the KL term.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import nn

PIXELS = 64 * 64
CLASSES = 10
LATENT = 128


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in itertools.pairwise(sizes):
        layers += [nn.Linear(a, b), nn.LayerNorm(b), nn.GELU()]
    return nn.Sequential(*layers)


class ConditionalVAE(nn.Module):
    def __init__(self, hidden: int = 2048, cond: int = 64) -> None:
        super().__init__()
        self.cond = nn.Embedding(CLASSES, cond)
        self.encoder = _mlp([PIXELS + cond, hidden, hidden, hidden // 2])
        self.mu = nn.Linear(hidden // 2, LATENT)
        self.logvar = nn.Linear(hidden // 2, LATENT)
        self.decoder = _mlp([LATENT + cond, hidden // 2, hidden, hidden])
        self.out = nn.Linear(hidden, PIXELS)

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        c = self.cond(y)
        h = self.encoder(torch.cat([x, c], 1))
        mu, logvar = self.mu(h), self.logvar(h).clamp(-10, 10)
        z = mu + torch.exp(0.5 * logvar) * torch.randn_like(mu)
        return self.out(self.decoder(torch.cat([z, c], 1))), mu, logvar


def make_model() -> nn.Module:
    return ConditionalVAE()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.rand(batch_size, PIXELS), torch.randint(0, CLASSES, (batch_size,))


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    logits, mu, logvar = model(x, y)
    recon = F.binary_cross_entropy_with_logits(logits, x, reduction="sum") / x.shape[0]
    kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(1).mean()
    return recon + kl
