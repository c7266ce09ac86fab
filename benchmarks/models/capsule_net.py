"""A capsule network with dynamic routing on digit images, as user code:
``capsule_net.py:make_model``.

A 9x9 convolution, then primary capsules (a strided convolution reshaped to 1,152 8-d
vectors and squashed); every primary capsule predicts every digit capsule through its own
weight matrix, applied by a broadcasting ``torch.matmul`` (the weight expanded over the
batch); three routing iterations in a Python loop (softmax of the logits over digit
capsules, weighted sum, squash, agreement by dot product), the predictions detached in all
but the last; margin loss on the capsule lengths plus a reconstruction decoder fed the true
class's capsule (``one_hot`` mask), MSE scaled down.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SIZE = 28
CLASSES = 10
ROUTING_ITERATIONS = 3


def squash(s: torch.Tensor, dim: int = -1) -> torch.Tensor:
    norm2 = (s * s).sum(dim, keepdim=True)
    return norm2 / (1 + norm2) * s / torch.sqrt(norm2 + 1e-8)


class CapsNet(nn.Module):
    def __init__(self, primary_dim: int = 8, digit_dim: int = 16) -> None:
        super().__init__()
        self.primary_dim = primary_dim
        self.conv = nn.Conv2d(1, 256, 9)
        self.primary = nn.Conv2d(256, 32 * primary_dim, 9, stride=2)
        primaries = 32 * 6 * 6
        self.weight = nn.Parameter(
            0.01 * torch.randn(1, primaries, CLASSES, digit_dim, primary_dim)
        )
        self.decoder = nn.Sequential(
            nn.Linear(CLASSES * digit_dim, 512),
            nn.ReLU(inplace=True),
            nn.Linear(512, 1024),
            nn.ReLU(inplace=True),
            nn.Linear(1024, SIZE * SIZE),
            nn.Sigmoid(),
        )

    def forward(self, images: torch.Tensor, labels: torch.Tensor):
        b = images.shape[0]
        h = F.relu(self.conv(images))
        u = self.primary(h).view(b, 32, self.primary_dim, 6, 6)
        u = squash(u.permute(0, 1, 3, 4, 2).reshape(b, -1, self.primary_dim))  # (B, 1152, 8)
        u_hat = torch.matmul(self.weight, u[:, :, None, :, None]).squeeze(-1)  # (B, 1152, 10, 16)
        u_hat_detached = u_hat.detach()
        logits = torch.zeros(b, u_hat.shape[1], CLASSES, device=images.device)
        for i in range(ROUTING_ITERATIONS):
            c = F.softmax(logits, dim=2)
            if i == ROUTING_ITERATIONS - 1:
                v = squash((c[..., None] * u_hat).sum(1))  # (B, 10, 16)
            else:
                v = squash((c[..., None] * u_hat_detached).sum(1))
                logits = logits + (u_hat_detached * v[:, None]).sum(-1)
        lengths = v.norm(dim=-1)
        mask = F.one_hot(labels, CLASSES).to(v.dtype)
        recon = self.decoder((v * mask[..., None]).flatten(1))
        return lengths, recon


def make_model() -> nn.Module:
    return CapsNet()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.rand(batch_size, 1, SIZE, SIZE), torch.randint(0, CLASSES, (batch_size,))


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    images, labels = batch
    lengths, recon = model(images, labels)
    target = F.one_hot(labels, CLASSES).to(lengths.dtype)
    present = target * F.relu(0.9 - lengths).pow(2)
    absent = 0.5 * (1 - target) * F.relu(lengths - 0.1).pow(2)
    margin = (present + absent).sum(1).mean()
    return margin + 0.0005 * F.mse_loss(recon, images.flatten(1), reduction="sum") / len(images)
