"""A Wasserstein GAN with gradient penalty (WGAN-GP) at 64x64, as user code:
``wgan_gp.py:make_model``.

The generator projects a 128-d latent to a 4x4 map and upsamples it four times by nearest
``nn.Upsample`` and residual 3x3 convolution blocks with batch norm. The critic is a stack
of residual blocks with layer normalisation over channels and space (``nn.GroupNorm`` with
one group) and average-pool downsampling, ending in a linear score. The loss is the
critic's Wasserstein estimate plus the gradient penalty: images interpolated at random
between real and (detached) generated ones are made leaves that require grad, the critic is
run on them and ``torch.autograd.grad(..., create_graph=True)`` gives the gradient of its
scores with respect to the images; the penalty is the squared distance of that gradient's
norm from 1, so the backward pass differentiates through the critic's own backward (double
backward). The generator's loss through the critic is added in the same step.
"""

from __future__ import annotations

import torch
from torch import nn

SIZE = 64
LATENT = 128
GP_WEIGHT = 10.0


class GenBlock(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.BatchNorm2d(cin),
            nn.ReLU(),
            nn.Upsample(scale_factor=2, mode="nearest"),
            nn.Conv2d(cin, cout, 3, padding=1),
            nn.BatchNorm2d(cout),
            nn.ReLU(),
            nn.Conv2d(cout, cout, 3, padding=1),
        )
        self.skip = nn.Sequential(nn.Upsample(scale_factor=2), nn.Conv2d(cin, cout, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x) + self.skip(x)


class CriticBlock(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.GroupNorm(1, cin),
            nn.LeakyReLU(0.2),
            nn.Conv2d(cin, cout, 3, padding=1),
            nn.GroupNorm(1, cout),
            nn.LeakyReLU(0.2),
            nn.Conv2d(cout, cout, 3, padding=1),
            nn.AvgPool2d(2),
        )
        self.skip = nn.Sequential(nn.AvgPool2d(2), nn.Conv2d(cin, cout, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x) + self.skip(x)


class Generator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.project = nn.Linear(LATENT, 4 * 4 * 512)
        self.blocks = nn.Sequential(
            GenBlock(512, 512), GenBlock(512, 256), GenBlock(256, 128), GenBlock(128, 64)
        )
        self.out = nn.Sequential(nn.BatchNorm2d(64), nn.ReLU(), nn.Conv2d(64, 3, 3, padding=1))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.out(self.blocks(self.project(z).view(-1, 512, 4, 4))))


class Critic(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 64, 3, padding=1)
        self.blocks = nn.Sequential(
            CriticBlock(64, 128),
            CriticBlock(128, 256),
            CriticBlock(256, 512),
            CriticBlock(512, 512),
        )
        self.head = nn.Linear(512 * 4 * 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.blocks(self.stem(x))).flatten(1))


class WGANGP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.generator = Generator()
        self.critic = Critic()


def gradient_penalty(critic: nn.Module, real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
    eps = torch.rand(real.shape[0], 1, 1, 1, device=real.device, dtype=real.dtype)
    mixed = (eps * real + (1 - eps) * fake).requires_grad_(True)
    scores = critic(mixed)
    (grad,) = torch.autograd.grad(scores.sum(), mixed, create_graph=True)
    return ((grad.flatten(1).norm(2, dim=1) - 1) ** 2).mean()


def make_model() -> nn.Module:
    return WGANGP()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(3206)
    real = torch.rand(batch_size, 3, SIZE, SIZE, generator=gen) * 2 - 1
    z = torch.randn(batch_size, LATENT, generator=gen)
    return real, z


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    real, z = batch
    fake = model.generator(z)
    detached = fake.detach()
    critic_loss = model.critic(detached).mean() - model.critic(real).mean()
    penalty = gradient_penalty(model.critic, real, detached)
    gen_loss = -model.critic(fake).mean()
    return critic_loss + GP_WEIGHT * penalty + gen_loss
