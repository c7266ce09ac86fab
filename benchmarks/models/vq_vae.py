"""A VQ-VAE, as user code: ``vq_vae.py:make_model``: a convolutional encoder, a codebook
looked up by nearest distance (``argmin`` over ``x^2 - 2xe + e^2``), the straight-through
estimator, commitment and codebook losses, a transposed-convolution decoder."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SIZE = 128
CODES = 1024
DIM = 64


class VQVAE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(3, 128, 4, 2, 1),
            nn.ReLU(),
            nn.Conv2d(128, 128, 4, 2, 1),
            nn.ReLU(),
            nn.Conv2d(128, DIM, 3, 1, 1),
        )
        self.codebook = nn.Embedding(CODES, DIM)
        self.decoder = nn.Sequential(
            nn.Conv2d(DIM, 128, 3, 1, 1),
            nn.ReLU(),
            nn.ConvTranspose2d(128, 128, 4, 2, 1),
            nn.ReLU(),
            nn.ConvTranspose2d(128, 3, 4, 2, 1),
        )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = self.encoder(x)
        flat = z.permute(0, 2, 3, 1).reshape(-1, DIM)
        e = self.codebook.weight
        dist = flat.pow(2).sum(1, keepdim=True) - 2 * flat @ e.t() + e.pow(2).sum(1)
        q = self.codebook(dist.argmin(1)).view(z.shape[0], z.shape[2], z.shape[3], DIM)
        q = q.permute(0, 3, 1, 2)
        vq_loss = F.mse_loss(q, z.detach()) + 0.25 * F.mse_loss(z, q.detach())
        return self.decoder(z + (q - z).detach()), vq_loss


def make_model() -> nn.Module:
    return VQVAE()


def make_batch(batch_size: int, seq_len: int | None) -> torch.Tensor:
    return torch.randn(batch_size, 3, SIZE, SIZE)


def loss_fn(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    recon, vq_loss = model(batch)
    return F.mse_loss(recon, batch) + vq_loss
