"""A semantic segmentation network with modulated deformable convolutions (DCNv2), as user
code: ``deformable_segmenter.py:make_model``.

A ResNet-34-style backbone written out (``BatchNorm2d``, basic blocks); in its last two
stages every 3x3 convolution is deformable: a plain zero-initialised ``Conv2d`` predicts two
offsets and one modulation scalar per kernel tap and output pixel, split by ``torch.chunk``,
the scalars through a sigmoid, and ``torchvision.ops.DeformConv2d`` samples the input at the
shifted taps (the last stage dilated instead of strided, output stride 16). An ASPP-like
head of parallel dilated convolutions joined by ``torch.cat``, a 1x1 classifier, bilinear
upsampling to the input size; pixel-wise cross-entropy with ``ignore_index`` for void
labels.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torchvision.ops import DeformConv2d

SIZE = 512
CLASSES = 19
IGNORE = 255


class ModulatedDeformConv(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1, dilation: int = 1) -> None:
        super().__init__()
        self.offset = nn.Conv2d(cin, 3 * 9, 3, stride, padding=dilation, dilation=dilation)
        nn.init.zeros_(self.offset.weight)
        nn.init.zeros_(self.offset.bias)
        self.conv = DeformConv2d(
            cin, cout, 3, stride=stride, padding=dilation, dilation=dilation, bias=False
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        o1, o2, mask = torch.chunk(self.offset(x), 3, dim=1)
        return self.conv(x, torch.cat([o1, o2], 1), torch.sigmoid(mask))


def conv3x3(
    cin: int, cout: int, stride: int = 1, dilation: int = 1, deform: bool = False
) -> nn.Module:
    if deform:
        return ModulatedDeformConv(cin, cout, stride, dilation)
    return nn.Conv2d(cin, cout, 3, stride, padding=dilation, dilation=dilation, bias=False)


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, dilation: int, deform: bool) -> None:
        super().__init__()
        self.conv1 = conv3x3(cin, cout, stride, dilation, deform)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = conv3x3(cout, cout, 1, dilation, deform)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        skip = x if self.down is None else self.down(x)
        return F.relu(out + skip)


def stage(
    cin: int, cout: int, blocks: int, stride: int, dilation: int, deform: bool
) -> nn.Sequential:
    layers = [BasicBlock(cin, cout, stride, dilation, deform)]
    layers += [BasicBlock(cout, cout, 1, dilation, deform) for _ in range(blocks - 1)]
    return nn.Sequential(*layers)


class DeformableSegmenter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1),
        )
        self.layer1 = stage(64, 64, 3, 1, 1, deform=False)
        self.layer2 = stage(64, 128, 4, 2, 1, deform=False)
        self.layer3 = stage(128, 256, 6, 2, 1, deform=True)
        self.layer4 = stage(256, 512, 3, 1, 2, deform=True)
        self.aspp = nn.ModuleList(
            nn.Sequential(
                nn.Conv2d(512, 256, 1 if d == 1 else 3, padding=0 if d == 1 else d, dilation=d),
                nn.BatchNorm2d(256),
                nn.ReLU(inplace=True),
            )
            for d in (1, 6, 12, 18)
        )
        self.project = nn.Sequential(
            nn.Conv2d(4 * 256, 256, 1, bias=False), nn.BatchNorm2d(256), nn.ReLU(inplace=True)
        )
        self.classify = nn.Conv2d(256, CLASSES, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size = x.shape[-2:]
        h = self.layer4(self.layer3(self.layer2(self.layer1(self.stem(x)))))
        h = self.project(torch.cat([branch(h) for branch in self.aspp], 1))
        return F.interpolate(self.classify(h), size=size, mode="bilinear", align_corners=False)


def make_model() -> nn.Module:
    return DeformableSegmenter()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    labels = torch.randint(0, CLASSES, (batch_size, SIZE, SIZE))
    labels[torch.rand(batch_size, SIZE, SIZE) < 0.05] = IGNORE
    return torch.randn(batch_size, 3, SIZE, SIZE), labels


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    images, labels = batch
    return F.cross_entropy(model(images), labels, ignore_index=IGNORE)
