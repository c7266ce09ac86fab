"""A vision transformer whose patches are cut with ``F.unfold``, as user code:
``unfold_vit.py:make_model``. The encoder is PyTorch's ``nn.TransformerEncoder``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SIZE = 224
PATCH = 16
CLASSES = 1000


class UnfoldViT(nn.Module):
    def __init__(self, dim: int = 384, depth: int = 8, heads: int = 6) -> None:
        super().__init__()
        patches = (SIZE // PATCH) ** 2
        self.embed = nn.Linear(3 * PATCH * PATCH, dim)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, patches + 1, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(
            dim,
            heads,
            4 * dim,
            dropout=0.1,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        patches = F.unfold(x, PATCH, stride=PATCH).transpose(1, 2)  # (B, N, 3*P*P)
        h = self.embed(patches)
        h = torch.cat([self.cls.expand(h.shape[0], -1, -1), h], 1) + self.pos
        return self.head(self.norm(self.encoder(h))[:, 0])


def make_model() -> nn.Module:
    return UnfoldViT()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(batch_size, 3, SIZE, SIZE), torch.randint(0, CLASSES, (batch_size,))


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y, label_smoothing=0.1)
