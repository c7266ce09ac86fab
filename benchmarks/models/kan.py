"""A Kolmogorov-Arnold network (KAN) on flattened digit images, as user code:
``kan.py:make_model``.

Each layer is a learnable spline on every input-output edge, written as in efficient-kan: the
cubic B-spline bases of every input evaluated from a grid buffer by comparisons (``>=``,
``<``, cast to float) and the Cox-de Boor recursion over slices of the grid, flattened and
multiplied by the spline coefficients (scaled per edge); plus a SiLU base branch. The loss
adds an L1 penalty on the coefficients to the cross-entropy.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import nn

PIXELS = 28 * 28
CLASSES = 10


class KANLinear(nn.Module):
    def __init__(
        self,
        fan_in: int,
        fan_out: int,
        grid_size: int = 5,
        order: int = 3,
        grid_range: tuple[float, float] = (-1.0, 1.0),
    ) -> None:
        super().__init__()
        self.fan_in, self.fan_out, self.order = fan_in, fan_out, order
        step = (grid_range[1] - grid_range[0]) / grid_size
        knots = torch.arange(-order, grid_size + order + 1) * step + grid_range[0]
        self.register_buffer("grid", knots.expand(fan_in, -1).contiguous())
        self.base_weight = nn.Parameter(torch.randn(fan_out, fan_in) * fan_in**-0.5)
        self.spline_weight = nn.Parameter(
            torch.randn(fan_out, fan_in, grid_size + order) * 0.1 / grid_size
        )
        self.spline_scaler = nn.Parameter(torch.ones(fan_out, fan_in))

    def b_splines(self, x: torch.Tensor) -> torch.Tensor:
        """(B, in) -> (B, in, grid_size + order): each input's B-spline bases."""
        grid = self.grid
        x = x.unsqueeze(-1)
        bases = ((x >= grid[:, :-1]) & (x < grid[:, 1:])).to(x.dtype)
        for k in range(1, self.order + 1):
            left = (x - grid[:, : -(k + 1)]) / (grid[:, k:-1] - grid[:, : -(k + 1)])
            right = (grid[:, k + 1 :] - x) / (grid[:, k + 1 :] - grid[:, 1:(-k)])
            bases = left * bases[:, :, :-1] + right * bases[:, :, 1:]
        return bases

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        base = F.linear(F.silu(x), self.base_weight)
        scaled = self.spline_weight * self.spline_scaler.unsqueeze(-1)
        spline = F.linear(self.b_splines(x).flatten(1), scaled.flatten(1))
        return base + spline

    def regularization(self) -> torch.Tensor:
        return self.spline_weight.abs().mean()


class KAN(nn.Module):
    def __init__(self, widths: tuple[int, ...] = (PIXELS, 1024, 1024, 512, CLASSES)) -> None:
        super().__init__()
        self.layers = nn.ModuleList(KANLinear(a, b) for a, b in itertools.pairwise(widths))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def make_model() -> nn.Module:
    return KAN()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.rand(batch_size, PIXELS) * 2 - 1, torch.randint(0, CLASSES, (batch_size,))


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    penalty = sum(layer.regularization() for layer in model.layers)
    return F.cross_entropy(model(x), y) + 1e-4 * penalty
