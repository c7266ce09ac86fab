"""A matrix product state (tensor network) image classifier, as user code:
``mps_classifier.py:make_model``.

Each pixel of a 32x32 grayscale image is mapped to a local feature vector (``cos`` and
``sin`` of its scaled intensity, and their product); every site has a core tensor of shape
(features, bond, bond) and contracting the pixel's vector into it by ``einsum`` leaves one
bond x bond matrix per pixel. The chain of 1,024 matrices is contracted as a balanced tree of
batched ``matmul`` (pairs of neighbours, halving the chain each level), each level's products
rescaled by their Frobenius norm to keep the magnitudes bounded. The left and right halves
close around a label core by a trace written as one ``einsum``; cross-entropy on the
resulting class scores. The cores start near the identity.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

SIZE = 32
CLASSES = 10
LOCAL = 3


class MPSClassifier(nn.Module):
    def __init__(self, bond: int = 48, sites: int = SIZE * SIZE) -> None:
        super().__init__()
        eye = torch.eye(bond).expand(sites, LOCAL, bond, bond)
        self.cores = nn.Parameter(eye / LOCAL + 0.01 * torch.randn(sites, LOCAL, bond, bond))
        label = torch.eye(bond).expand(CLASSES, bond, bond)
        self.label = nn.Parameter(label + 0.01 * torch.randn(CLASSES, bond, bond))
        self.bond = bond

    def contract(self, mats: torch.Tensor) -> torch.Tensor:
        """(b, n, D, D) -> (b, D, D), pairing neighbours level by level."""
        while mats.shape[1] > 1:
            if mats.shape[1] % 2:
                mats = torch.cat([mats[:, :-2], mats[:, -2:-1] @ mats[:, -1:]], 1)
                continue
            mats = mats[:, 0::2] @ mats[:, 1::2]
            mats = mats / mats.norm(dim=(-2, -1), keepdim=True) * math.sqrt(self.bond)
        return mats[:, 0]

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.flatten(1) * (math.pi / 2)
        phi = torch.stack([x.cos(), x.sin(), x.cos() * x.sin()], -1)  # (b, n, LOCAL)
        mats = torch.einsum("bnp,npij->bnij", phi, self.cores)
        half = mats.shape[1] // 2
        left = self.contract(mats[:, :half])
        right = self.contract(mats[:, half:])
        return torch.einsum("bij,cjk,bki->bc", left, self.label, right) / self.bond


def make_model() -> nn.Module:
    return MPSClassifier()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.rand(batch_size, 1, SIZE, SIZE), torch.randint(0, CLASSES, (batch_size,))


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    images, labels = batch
    return F.cross_entropy(model(images), labels)
