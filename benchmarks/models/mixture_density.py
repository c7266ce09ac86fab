"""A mixture density network for multi-modal regression, as user code:
``mixture_density.py:make_model``.

A residual MLP (pre-``LayerNorm`` blocks, SiLU, dropout) maps each 256-feature input to the
parameters of a Gaussian mixture over a 32-d target: mixing logits, means and log standard
deviations (clamped, then ``exp``). The likelihood is built from ``torch.distributions`` as
users write it: ``MixtureSameFamily`` of a ``Categorical`` over components and an
``Independent`` diagonal ``Normal``, with argument validation left at its default; the loss
is the mean negative ``log_prob`` of the targets.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributions import Categorical, Independent, MixtureSameFamily, Normal

FEATURES = 256
TARGET_DIM = 32
COMPONENTS = 64


class ResidualBlock(nn.Module):
    def __init__(self, dim: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.LayerNorm(dim),
            nn.Linear(dim, 2 * dim),
            nn.SiLU(),
            nn.Dropout(dropout),
            nn.Linear(2 * dim, dim),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.net(x)


class MDN(nn.Module):
    def __init__(self, dim: int = 1024, blocks: int = 6) -> None:
        super().__init__()
        self.inp = nn.Linear(FEATURES, dim)
        self.blocks = nn.Sequential(*(ResidualBlock(dim) for _ in range(blocks)))
        self.norm = nn.LayerNorm(dim)
        self.logits = nn.Linear(dim, COMPONENTS)
        self.means = nn.Linear(dim, COMPONENTS * TARGET_DIM)
        self.log_scales = nn.Linear(dim, COMPONENTS * TARGET_DIM)

    def forward(self, x: torch.Tensor) -> MixtureSameFamily:
        h = self.norm(self.blocks(self.inp(x)))
        shape = (x.shape[0], COMPONENTS, TARGET_DIM)
        means = self.means(h).view(shape)
        scales = self.log_scales(h).view(shape).clamp(-7.0, 5.0).exp()
        mixture = Categorical(logits=self.logits(h))
        return MixtureSameFamily(mixture, Independent(Normal(means, scales), 1))


def make_model() -> nn.Module:
    return MDN()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(batch_size, FEATURES)
    branch = torch.randint(0, 2, (batch_size, 1)) * 2 - 1  # two modes per input
    y = branch * x[:, :TARGET_DIM].tanh() + 0.1 * torch.randn(batch_size, TARGET_DIM)
    return x, y


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return -model(x).log_prob(y).mean()
