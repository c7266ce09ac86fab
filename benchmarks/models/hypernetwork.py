"""A hypernetwork that writes a per-image implicit neural representation, as user code:
``hypernetwork.py:make_model``.

A convolutional encoder reads each image and a linear head generates the full weight vector
of a small SIREN (an MLP with sine activations mapping a pixel's (x, y) to its colour); the
vector is cut into that network's parameter shapes (``split`` and ``view`` into a dict named
as the SIREN's own ``named_parameters``). The SIREN is a template module whose weights are
never trained: it is run with each image's generated weights by
``torch.func.functional_call``, vectorised over the batch by ``torch.func.vmap`` with the
coordinate grid shared (``in_dims=(0, None)``). Loss: MSE between the colours it predicts
at every pixel and the image's.
"""

from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap

SIZE = 128


class Sine(nn.Module):
    def __init__(self, w0: float = 30.0) -> None:
        super().__init__()
        self.w0 = w0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(self.w0 * x)


class Siren(nn.Module):
    def __init__(self, hidden: int = 256, layers: int = 3) -> None:
        super().__init__()
        widths = [2] + [hidden] * layers
        blocks: list[nn.Module] = []
        for fan_in, fan_out in itertools.pairwise(widths):
            blocks += [nn.Linear(fan_in, fan_out), Sine()]
        blocks.append(nn.Linear(hidden, 3))
        self.net = nn.Sequential(*blocks)

    def forward(self, coords: torch.Tensor) -> torch.Tensor:
        return self.net(coords)


class Encoder(nn.Module):
    def __init__(self, dim: int = 512) -> None:
        super().__init__()
        chans = [3, 64, 128, 256, 512]
        layers: list[nn.Module] = []
        for a, b in itertools.pairwise(chans):
            layers += [nn.Conv2d(a, b, 3, stride=2, padding=1), nn.BatchNorm2d(b), nn.ReLU()]
        self.conv = nn.Sequential(*layers)
        self.fc = nn.Linear(chans[-1], dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.fc(self.conv(x).mean((2, 3))))


class HyperINR(nn.Module):
    def __init__(self, dim: int = 512) -> None:
        super().__init__()
        self.target = Siren().requires_grad_(False)
        self.shapes = {name: p.shape for name, p in self.target.named_parameters()}
        total = sum(math.prod(s) for s in self.shapes.values())
        self.encoder = Encoder(dim)
        self.generate = nn.Linear(dim, total)
        nn.init.uniform_(self.generate.weight, -1e-4, 1e-4)
        base = torch.cat([p.detach().flatten() for p in self.target.parameters()])
        with torch.no_grad():
            self.generate.bias.copy_(base)  # start from the template's initialisation
        axis = torch.linspace(-1.0, 1.0, SIZE)
        grid = torch.stack(torch.meshgrid(axis, axis, indexing="ij"), -1).reshape(-1, 2)
        self.register_buffer("coords", grid, persistent=False)

    def weights_for(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        flat = self.generate(self.encoder(images))
        sizes = [math.prod(s) for s in self.shapes.values()]
        chunks = flat.split(sizes, dim=1)
        return {
            name: chunk.view(-1, *shape)
            for (name, shape), chunk in zip(self.shapes.items(), chunks, strict=True)
        }

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        params = self.weights_for(images)

        def render(p: dict[str, torch.Tensor], coords: torch.Tensor) -> torch.Tensor:
            return functional_call(self.target, p, (coords,))

        return vmap(render, in_dims=(0, None))(params, self.coords)  # (B, H*W, 3)


def make_model() -> nn.Module:
    return HyperINR()


def make_batch(batch_size: int, seq_len: int | None) -> torch.Tensor:
    return torch.rand(batch_size, 3, SIZE, SIZE)


def loss_fn(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    target = batch.flatten(2).transpose(1, 2)  # (B, H*W, 3)
    return F.mse_loss(model(batch), target)
