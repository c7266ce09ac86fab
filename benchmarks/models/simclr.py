"""SimCLR contrastive pre-training on 32x32 colour images, as user code:
``simclr.py:make_model``.

Two augmented views of every image made on the device in the loss: reflect padding and a
random crop per image by advanced indexing with per-image offsets, random horizontal flips by
``torch.where``, per-image brightness and contrast jitter and random greyscale. A ResNet-18
written out (3x3 stem for small images, ``BatchNorm2d``), a projection MLP with
``BatchNorm1d``; NT-Xent: the normalised projections of both views multiplied into one
``2N x 2N`` similarity matrix, its diagonal masked by ``masked_fill`` of an ``eye``, and
cross-entropy against each view's partner.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SIZE = 32
PAD = 4
TEMPERATURE = 0.5


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(h)) + self.short(x))


class SimCLR(nn.Module):
    def __init__(self, projection: int = 128) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64))
        layers: list[nn.Module] = []
        cin = 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.projector = nn.Sequential(
            nn.Linear(512, 2048, bias=False),
            nn.BatchNorm1d(2048),
            nn.ReLU(inplace=True),
            nn.Linear(2048, projection),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.layers(F.relu(self.stem(x)))
        return self.projector(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))


def augment(images: torch.Tensor) -> torch.Tensor:
    """A random view of each image: crop, flip, colour jitter, sometimes grey."""
    b = images.shape[0]
    dev = images.device
    padded = F.pad(images, (PAD, PAD, PAD, PAD), mode="reflect")
    top = torch.randint(0, 2 * PAD + 1, (b,), device=dev)
    left = torch.randint(0, 2 * PAD + 1, (b,), device=dev)
    steps = torch.arange(SIZE, device=dev)
    rows = (top[:, None] + steps)[:, :, None]  # (B, S, 1)
    cols = (left[:, None] + steps)[:, None, :]  # (B, 1, S)
    x = padded.permute(0, 2, 3, 1)[torch.arange(b, device=dev)[:, None, None], rows, cols]
    x = x.permute(0, 3, 1, 2)  # (B, 3, S, S)
    flip = torch.rand(b, 1, 1, 1, device=dev) < 0.5
    x = torch.where(flip, x.flip(-1), x)
    brightness = torch.empty(b, 1, 1, 1, device=dev).uniform_(0.6, 1.4)
    contrast = torch.empty(b, 1, 1, 1, device=dev).uniform_(0.6, 1.4)
    x = x * brightness
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    x = ((x - mean) * contrast + mean).clamp(0, 1)
    grey = (x * torch.tensor([0.299, 0.587, 0.114], device=dev).view(1, 3, 1, 1)).sum(
        1, keepdim=True
    )
    to_grey = torch.rand(b, 1, 1, 1, device=dev) < 0.2
    return torch.where(to_grey, grey.expand_as(x), x)


def nt_xent(z: torch.Tensor, temperature: float) -> torch.Tensor:
    """z: (2N, D), the first N and the last N the two views of the same images."""
    n = z.shape[0] // 2
    z = F.normalize(z.float(), dim=1)
    sim = z @ z.t() / temperature
    self_mask = torch.eye(2 * n, dtype=torch.bool, device=z.device)
    sim = sim.masked_fill(self_mask, float("-inf"))
    targets = torch.arange(2 * n, device=z.device).roll(n)
    return F.cross_entropy(sim, targets)


def make_model() -> nn.Module:
    return SimCLR()


def make_batch(batch_size: int, seq_len: int | None) -> torch.Tensor:
    return torch.rand(batch_size, 3, SIZE, SIZE)


def loss_fn(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    views = torch.cat([augment(batch), augment(batch)], 0)
    return nt_xent(model(views), TEMPERATURE)
