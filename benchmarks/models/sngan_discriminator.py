"""A spectrally normalised GAN (SNGAN) at 128x128, as user code:
``sngan_discriminator.py:make_model``.

The generator maps a 128-d latent to a 4x4x1024 map by a linear layer and doubles it five
times with ``nn.ConvTranspose2d`` (kernel 4, stride 2), batch norm and ReLU, to a ``tanh``
RGB image. Every convolution and the final linear layer of the discriminator are wrapped in
``torch.nn.utils.parametrizations.spectral_norm``: the weight is recomputed on each forward
from the stored original divided by its largest singular value, estimated by one step of
power iteration whose vectors are buffers updated in place. The discriminator is a stack of
strided convolutions with LeakyReLU and a global sum pool. One step trains both players
from a single loss: the discriminator's hinge loss on real images and detached generated
images, plus the generator's non-saturating loss through the discriminator.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrizations import spectral_norm

SIZE = 128
LATENT = 128


class Generator(nn.Module):
    def __init__(self, width: int = 1024) -> None:
        super().__init__()
        self.width = width
        self.project = nn.Linear(LATENT, 4 * 4 * width)
        chans = [width, 512, 256, 128, 64, 32]
        layers: list[nn.Module] = []
        for cin, cout in itertools.pairwise(chans):
            layers += [
                nn.BatchNorm2d(cin),
                nn.ReLU(inplace=True),
                nn.ConvTranspose2d(cin, cout, 4, stride=2, padding=1),
            ]
        layers += [nn.BatchNorm2d(32), nn.ReLU(inplace=True), nn.Conv2d(32, 3, 3, padding=1)]
        self.body = nn.Sequential(*layers)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        x = self.project(z).view(-1, self.width, 4, 4)
        return torch.tanh(self.body(x))


class Discriminator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        spec = [(3, 64, 3, 1), (64, 64, 4, 2), (64, 128, 3, 1), (128, 128, 4, 2)]
        spec += [(128, 256, 3, 1), (256, 256, 4, 2), (256, 512, 3, 1), (512, 512, 4, 2)]
        spec += [(512, 1024, 3, 1), (1024, 1024, 4, 2)]
        layers: list[nn.Module] = []
        for cin, cout, k, s in spec:
            layers.append(spectral_norm(nn.Conv2d(cin, cout, k, stride=s, padding=1)))
            layers.append(nn.LeakyReLU(0.1))
        self.body = nn.Sequential(*layers)
        self.head = spectral_norm(nn.Linear(1024, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x).sum((2, 3)))


class SNGAN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.generator = Generator()
        self.discriminator = Discriminator()


def make_model() -> nn.Module:
    return SNGAN()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(2206)
    real = torch.rand(batch_size, 3, SIZE, SIZE, generator=gen) * 2 - 1
    z = torch.randn(batch_size, LATENT, generator=gen)
    return real, z


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    real, z = batch
    fake = model.generator(z)
    d_real = model.discriminator(real)
    d_fake = model.discriminator(fake.detach())
    d_loss = F.relu(1 - d_real).mean() + F.relu(1 + d_fake).mean()
    g_loss = -model.discriminator(fake).mean()
    return d_loss + g_loss
