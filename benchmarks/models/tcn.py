"""A temporal convolutional network for forecasting, as user code: ``tcn.py:make_model``.

Residual blocks of two dilated causal ``Conv1d`` (left padding by ``F.pad``, dilation doubling
per block) whose weights are reparametrised by
``torch.nn.utils.parametrizations.weight_norm``; ReLU and dropout, 1x1 convolutions on the
residual where the width changes; every step predicts the next step's channels (MSE).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

CHANNELS = 16
DEFAULT_SEQ_LEN = 4096


class CausalConv1d(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: int, dilation: int) -> None:
        super().__init__()
        self.left = (kernel - 1) * dilation
        self.conv = weight_norm(nn.Conv1d(cin, cout, kernel, dilation=dilation))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.pad(x, (self.left, 0)))


class TemporalBlock(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: int, dilation: int) -> None:
        super().__init__()
        self.conv1 = CausalConv1d(cin, cout, kernel, dilation)
        self.conv2 = CausalConv1d(cout, cout, kernel, dilation)
        self.drop = nn.Dropout(0.2)
        self.down = nn.Conv1d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.drop(F.relu(self.conv1(x)))
        h = self.drop(F.relu(self.conv2(h)))
        return F.relu(h + self.down(x))


class TCN(nn.Module):
    def __init__(self, hidden: int = 256, levels: int = 8, kernel: int = 3) -> None:
        super().__init__()
        widths = [CHANNELS] + [hidden] * levels
        self.blocks = nn.Sequential(
            *(TemporalBlock(widths[i], widths[i + 1], kernel, 2**i) for i in range(levels))
        )
        self.head = nn.Conv1d(hidden, CHANNELS, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x))


def make_model() -> nn.Module:
    return TCN()


def make_batch(batch_size: int, seq_len: int | None) -> torch.Tensor:
    n = seq_len or DEFAULT_SEQ_LEN
    steps = torch.linspace(0, 50, n + 1)
    phase = torch.rand(batch_size, CHANNELS, 1) * 6.28
    return torch.sin(steps + phase) + 0.1 * torch.randn(batch_size, CHANNELS, n + 1)


def loss_fn(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(model(batch[:, :, :-1]), batch[:, :, 1:])
