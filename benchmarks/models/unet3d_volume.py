"""A 3-D U-Net for volumetric segmentation, as user code: ``unet3d_volume.py:make_model``.

nnU-Net-style: four MRI modalities of a 128x128x128 volume go through five resolution
levels of two 3x3x3 ``nn.Conv3d`` with ``nn.InstanceNorm3d`` (affine) and LeakyReLU, the
first convolution of each deeper level strided by 2. The decoder upsamples by
``nn.ConvTranspose3d`` (kernel 2, stride 2), concatenates the encoder's features of the same
level and convolves twice. Deep supervision: 1x1x1 heads at the three finest decoder levels,
the label volume downsampled to each by ``F.interpolate`` (nearest, 3-D). Loss per head:
cross-entropy plus a soft Dice loss over the one-hot classes (``F.one_hot`` permuted to
channels-first), weighted by 1, 1/2, 1/4.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SIZE = 128
MODALITIES = 4
CLASSES = 4
WIDTHS = [32, 64, 128, 256, 320]


def conv_block(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv3d(cin, cout, 3, stride=stride, padding=1),
        nn.InstanceNorm3d(cout, affine=True),
        nn.LeakyReLU(0.01, inplace=True),
        nn.Conv3d(cout, cout, 3, padding=1),
        nn.InstanceNorm3d(cout, affine=True),
        nn.LeakyReLU(0.01, inplace=True),
    )


class UNet3D(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.down = nn.ModuleList()
        cin = MODALITIES
        for i, width in enumerate(WIDTHS):
            self.down.append(conv_block(cin, width, stride=1 if i == 0 else 2))
            cin = width
        self.up = nn.ModuleList()
        self.fuse = nn.ModuleList()
        for deep, shallow in zip(WIDTHS[:0:-1], WIDTHS[-2::-1], strict=True):
            self.up.append(nn.ConvTranspose3d(deep, shallow, 2, stride=2))
            self.fuse.append(conv_block(2 * shallow, shallow))
        self.heads = nn.ModuleList(nn.Conv3d(w, CLASSES, 1) for w in WIDTHS[2::-1])

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        skips = []
        for level in self.down:
            x = level(x)
            skips.append(x)
        features = []
        for up, fuse, skip in zip(self.up, self.fuse, skips[-2::-1], strict=True):
            x = fuse(torch.cat([up(x), skip], 1))
            features.append(x)
        outputs = [head(f) for head, f in zip(self.heads, features[-3:], strict=True)]
        return outputs[::-1]  # finest first


def soft_dice(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    prob = logits.float().softmax(1)
    onehot = F.one_hot(labels, CLASSES).permute(0, 4, 1, 2, 3).float()
    dims = (0, 2, 3, 4)
    inter = (prob * onehot).sum(dims)
    denom = prob.sum(dims) + onehot.sum(dims)
    return 1 - ((2 * inter + 1e-5) / (denom + 1e-5)).mean()


def make_model() -> nn.Module:
    return UNet3D()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(6206)
    volumes = torch.randn(batch_size, MODALITIES, SIZE, SIZE, SIZE, generator=gen)
    coarse = torch.randint(0, CLASSES, (batch_size, 1, 16, 16, 16), generator=gen).float()
    labels = F.interpolate(coarse, size=(SIZE, SIZE, SIZE), mode="nearest")[:, 0].long()
    return volumes, labels


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    volumes, labels = batch
    total = 0.0
    for i, logits in enumerate(model(volumes)):
        size = logits.shape[2:]
        target = F.interpolate(labels[:, None].float(), size=size, mode="nearest")[:, 0].long()
        total = total + (F.cross_entropy(logits.float(), target) + soft_dice(logits, target)) / 2**i
    return total
