"""An R(2+1)D video classifier on 16-frame clips, as user code: ``r2plus1d_video.py:make_model``.

Every 3-d convolution factorised into a spatial ``Conv3d`` with a (1, 3, 3) kernel and a
temporal ``Conv3d`` with a (3, 1, 1) kernel, ``BatchNorm3d`` and ReLU between them, the
middle width chosen to match a full 3x3x3 convolution's parameters; residual blocks that
stride in space and time, a ``MaxPool3d`` after the stem, ``AdaptiveAvgPool3d`` and a
linear head; clips of 16 frames at 112x112.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

FRAMES = 16
SIZE = 112
CLASSES = 400


class Conv2Plus1d(nn.Sequential):
    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        mid = (cin * cout * 27) // (cin * 9 + 3 * cout)
        super().__init__(
            nn.Conv3d(cin, mid, (1, 3, 3), (1, stride, stride), (0, 1, 1), bias=False),
            nn.BatchNorm3d(mid),
            nn.ReLU(inplace=True),
            nn.Conv3d(mid, cout, (3, 1, 1), (stride, 1, 1), (1, 0, 0), bias=False),
        )


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = Conv2Plus1d(cin, cout, stride)
        self.bn1 = nn.BatchNorm3d(cout)
        self.conv2 = Conv2Plus1d(cout, cout)
        self.bn2 = nn.BatchNorm3d(cout)
        self.down = (
            nn.Sequential(nn.Conv3d(cin, cout, 1, stride, bias=False), nn.BatchNorm3d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn1(self.conv1(x)), inplace=True)
        return F.relu(self.bn2(self.conv2(h)) + self.down(x), inplace=True)


class R2Plus1D(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv3d(3, 45, (1, 7, 7), (1, 2, 2), (0, 3, 3), bias=False),
            nn.BatchNorm3d(45),
            nn.ReLU(inplace=True),
            nn.Conv3d(45, 64, (3, 1, 1), 1, (1, 0, 0), bias=False),
            nn.BatchNorm3d(64),
            nn.ReLU(inplace=True),
            nn.MaxPool3d((1, 3, 3), (1, 2, 2), (0, 1, 1)),
        )
        blocks: list[nn.Module] = []
        cin = 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks += [Block(cin, cout, stride), Block(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool3d(1)
        self.drop = nn.Dropout(0.5)
        self.head = nn.Linear(512, CLASSES)

    def forward(self, clips: torch.Tensor) -> torch.Tensor:
        h = self.pool(self.blocks(self.stem(clips))).flatten(1)
        return self.head(self.drop(h))


def make_model() -> nn.Module:
    return R2Plus1D()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    clips = torch.randn(batch_size, 3, FRAMES, SIZE, SIZE)
    return clips, torch.randint(0, CLASSES, (batch_size,))


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    clips, labels = batch
    return F.cross_entropy(model(clips), labels)
