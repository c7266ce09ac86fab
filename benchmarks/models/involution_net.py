"""A RedNet-style image classifier built on involution, as user code:
``involution_net.py:make_model``.

Bottleneck residual blocks whose spatial operator is an involution instead of a 3x3
convolution: a kernel of 7 x 7 weights is generated for every pixel (and each group of 16
channels) from the feature at that pixel by two 1x1 convolutions, the neighbourhoods are cut
out by ``F.unfold`` (49 copies of the feature map), multiplied by the generated kernels and
summed; the strided blocks average-pool before generating the kernels and unfold with a
stride. A convolutional stem, ``BatchNorm2d`` throughout, global average pooling and a
linear head; cross-entropy with label smoothing.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SIZE = 224
CLASSES = 1000


class Involution(nn.Module):
    def __init__(self, channels: int, kernel: int = 7, stride: int = 1) -> None:
        super().__init__()
        self.kernel, self.stride = kernel, stride
        self.groups = channels // 16
        self.pool = nn.AvgPool2d(stride, stride) if stride > 1 else nn.Identity()
        self.reduce = nn.Sequential(
            nn.Conv2d(channels, channels // 4, 1, bias=False),
            nn.BatchNorm2d(channels // 4),
            nn.ReLU(inplace=True),
        )
        self.span = nn.Conv2d(channels // 4, kernel * kernel * self.groups, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        k, g = self.kernel, self.groups
        ho, wo = h // self.stride, w // self.stride
        weight = self.span(self.reduce(self.pool(x))).view(b, g, 1, k * k, ho, wo)
        patches = F.unfold(x, k, padding=k // 2, stride=self.stride)
        patches = patches.view(b, g, c // g, k * k, ho, wo)
        return (weight * patches).sum(3).view(b, c, ho, wo)


class Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = 4 * width
        self.body = nn.Sequential(
            nn.Conv2d(cin, width, 1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            Involution(width, stride=stride),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        )
        self.skip: nn.Module = nn.Identity()
        if stride > 1 or cin != cout:
            self.skip = nn.Sequential(
                nn.AvgPool2d(stride, stride) if stride > 1 else nn.Identity(),
                nn.Conv2d(cin, cout, 1, bias=False),
                nn.BatchNorm2d(cout),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + self.skip(x))


class RedNet(nn.Module):
    def __init__(self, depths: tuple[int, ...] = (2, 2, 2, 2)) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1),
        )
        layers: list[nn.Module] = []
        cin = 64
        for i, depth in enumerate(depths):
            width = 64 * 2**i
            for j in range(depth):
                layers.append(Bottleneck(cin, width, 2 if j == 0 and i > 0 else 1))
                cin = 4 * width
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(cin, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.head(x.mean((2, 3)))


def make_model() -> nn.Module:
    return RedNet()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(batch_size, 3, SIZE, SIZE), torch.randint(0, CLASSES, (batch_size,))


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    images, labels = batch
    return F.cross_entropy(model(images), labels, label_smoothing=0.1)
