"""A MobileNetV3-style network written out, in channels-last memory format, as user code:
``mobilenet_se.py:make_model``.

Inverted residual blocks: a 1x1 expansion, a depthwise convolution (``groups`` = channels),
squeeze-and-excitation (``F.adaptive_avg_pool2d``, two 1x1 convolutions, ``sigmoid``
gating), a 1x1 projection, batch norm throughout, hardswish or ReLU; the model and the input
moved to ``torch.channels_last``; cross-entropy with label smoothing.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SIZE = 224
CLASSES = 1000

# kernel, expanded width, output width, squeeze-excite, hardswish, stride
BLOCKS = [
    (3, 16, 16, False, False, 1),
    (3, 64, 24, False, False, 2),
    (3, 72, 24, False, False, 1),
    (5, 72, 40, True, False, 2),
    (5, 120, 40, True, False, 1),
    (5, 120, 40, True, False, 1),
    (3, 240, 80, False, True, 2),
    (3, 200, 80, False, True, 1),
    (3, 184, 80, False, True, 1),
    (3, 184, 80, False, True, 1),
    (3, 480, 112, True, True, 1),
    (3, 672, 112, True, True, 1),
    (5, 672, 160, True, True, 2),
    (5, 960, 160, True, True, 1),
    (5, 960, 160, True, True, 1),
]


def _conv_bn(cin: int, cout: int, kernel: int = 1, stride: int = 1, groups: int = 1):
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    )


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        squeezed = max(8, channels // 4)
        self.reduce = nn.Conv2d(channels, squeezed, 1)
        self.expand = nn.Conv2d(squeezed, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1)
        return x * torch.sigmoid(self.expand(F.relu(self.reduce(s))))


class InvertedResidual(nn.Module):
    def __init__(
        self, cin: int, kernel: int, wide: int, cout: int, se: bool, hswish: bool, stride: int
    ) -> None:
        super().__init__()
        self.act = nn.Hardswish() if hswish else nn.ReLU()
        self.expand = _conv_bn(cin, wide) if wide != cin else None
        self.depthwise = _conv_bn(wide, wide, kernel, stride, groups=wide)
        self.se = SqueezeExcite(wide) if se else nn.Identity()
        self.project = _conv_bn(wide, cout)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.expand(x)) if self.expand is not None else x
        h = self.project(self.se(self.act(self.depthwise(h))))
        return x + h if self.residual else h


class MobileNetSE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = _conv_bn(3, 16, 3, 2)
        blocks = []
        cin = 16
        for kernel, wide, cout, se, hswish, stride in BLOCKS:
            blocks.append(InvertedResidual(cin, kernel, wide, cout, se, hswish, stride))
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.last = _conv_bn(cin, 960)
        self.head = nn.Sequential(
            nn.Linear(960, 1280), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(1280, CLASSES)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(memory_format=torch.channels_last)
        x = F.hardswish(self.stem(x))
        x = F.hardswish(self.last(self.blocks(x)))
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


def make_model() -> nn.Module:
    return MobileNetSE().to(memory_format=torch.channels_last)


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(batch_size, 3, SIZE, SIZE), torch.randint(0, CLASSES, (batch_size,))


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y, label_smoothing=0.1)
