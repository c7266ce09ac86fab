"""An ODE-Net image classifier (a neural ODE solved by a fixed-step RK4 loop), as user code:
``neural_ode.py:make_model``.

A strided convolutional stem down to 32x32 feature maps, then the ODE block: the dynamics
``f(t, h)`` are two 3x3 convolutions that each see the time as an extra input channel
(``torch.full`` of ``t`` joined by ``torch.cat``), with ``GroupNorm`` and ReLU; the state is
integrated from 0 to 1 by the classic fourth-order Runge-Kutta method written out in a Python
loop (four evaluations a step, the stages combined by scaled adds) and backpropagated
through directly, no adjoint. Global average pooling and a linear head; cross-entropy.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SIZE = 128
CLASSES = 200
RK4_STEPS = 6


class ConcatConv2d(nn.Conv2d):
    """A convolution whose input is the feature map with the time as one more channel."""

    def __init__(self, channels: int) -> None:
        super().__init__(channels + 1, channels, 3, padding=1)

    def forward(self, t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        tt = torch.full_like(x[:, :1], 1.0) * t
        return super().forward(torch.cat([tt, x], 1))


class ODEFunc(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(32, channels)
        self.conv1 = ConcatConv2d(channels)
        self.norm2 = nn.GroupNorm(32, channels)
        self.conv2 = ConcatConv2d(channels)
        self.norm3 = nn.GroupNorm(32, channels)
        self.evaluations = 0

    def forward(self, t: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        self.evaluations += 1
        out = self.conv1(t, F.relu(self.norm1(h)))
        out = self.conv2(t, F.relu(self.norm2(out)))
        return self.norm3(out)


def rk4(func: nn.Module, h: torch.Tensor, t0: float, t1: float, steps: int) -> torch.Tensor:
    dt = (t1 - t0) / steps
    t = h.new_tensor(t0)
    for _ in range(steps):
        k1 = func(t, h)
        k2 = func(t + dt / 2, h + dt / 2 * k1)
        k3 = func(t + dt / 2, h + dt / 2 * k2)
        k4 = func(t + dt, h + dt * k3)
        h = h + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        t = t + dt
    return h


class ODENet(nn.Module):
    def __init__(self, channels: int = 128) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 3, padding=1),
            nn.GroupNorm(32, 64),
            nn.ReLU(inplace=True),
            nn.Conv2d(64, channels, 4, stride=2, padding=1),
            nn.GroupNorm(32, channels),
            nn.ReLU(inplace=True),
            nn.Conv2d(channels, channels, 4, stride=2, padding=1),
        )
        self.odefunc = ODEFunc(channels)
        self.head = nn.Sequential(
            nn.GroupNorm(32, channels),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(channels, CLASSES),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = rk4(self.odefunc, self.stem(x), 0.0, 1.0, RK4_STEPS)
        return self.head(h)


def make_model() -> nn.Module:
    return ODENet()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(batch_size, 3, SIZE, SIZE), torch.randint(0, CLASSES, (batch_size,))


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    images, labels = batch
    return F.cross_entropy(model(images), labels)
