"""A SegNet semantic segmentation network, as user code: ``segnet_unpool.py:make_model``.

A VGG-16-style encoder of five stages of 3x3 convolutions with batch norm and ReLU, each
stage closed by ``F.max_pool2d(..., return_indices=True)`` that keeps the argmax positions
of every 2x2 window. The decoder mirrors it: each stage first upsamples by
``F.max_unpool2d`` with the indices saved by the matching encoder stage (the pooled values
go back to where the maxima were, zeros elsewhere), then densifies the sparse map with its
own convolutions. No skip connections carry features, only the pooling indices. A final 3x3
convolution gives per-pixel class scores on 352x480 street scenes; cross-entropy with
class weights and an ignored "void" label.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

HEIGHT, WIDTH = 352, 480
CLASSES = 12
VOID = 255
STAGES = [(3, 64, 2), (64, 128, 2), (128, 256, 3), (256, 512, 3), (512, 512, 3)]


def conv_bn_relu(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class SegNet(nn.Module):
    def __init__(self, classes: int = CLASSES) -> None:
        super().__init__()
        self.encoders = nn.ModuleList(
            nn.Sequential(*[conv_bn_relu(cin if i == 0 else cout, cout) for i in range(n)])
            for cin, cout, n in STAGES
        )
        decoders = []
        for cin, cout, n in reversed(STAGES):
            out = max(cin, 64)
            layers = [conv_bn_relu(cout, cout) for _ in range(n - 1)]
            layers.append(conv_bn_relu(cout, out))
            decoders.append(nn.Sequential(*layers))
        self.decoders = nn.ModuleList(decoders)
        self.classifier = nn.Conv2d(64, classes, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        saved = []
        for encoder in self.encoders:
            x = encoder(x)
            size = x.shape[-2:]
            x, indices = F.max_pool2d(x, 2, stride=2, return_indices=True)
            saved.append((indices, size))
        for decoder, (indices, size) in zip(self.decoders, reversed(saved), strict=True):
            x = F.max_unpool2d(x, indices, 2, stride=2, output_size=size)
            x = decoder(x)
        return self.classifier(x)


def make_model() -> nn.Module:
    return SegNet()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1206)
    images = torch.rand(batch_size, 3, HEIGHT, WIDTH, generator=gen)
    coarse = torch.randint(0, CLASSES, (batch_size, 1, HEIGHT // 16, WIDTH // 16), generator=gen)
    labels = F.interpolate(coarse.float(), size=(HEIGHT, WIDTH), mode="nearest")[:, 0].long()
    void = torch.rand(batch_size, HEIGHT, WIDTH, generator=gen) < 0.05
    return images, labels.masked_fill(void, VOID)


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    images, labels = batch
    logits = model(images)
    weights = torch.linspace(0.5, 2.0, CLASSES, device=logits.device)
    return F.cross_entropy(logits.float(), labels, weight=weights, ignore_index=VOID)
