"""A Set Transformer classifying point clouds of varying size, as user code:
``set_transformer.py:make_model``.

Each cloud has its own number of points, padded to the longest; the padding mask is built on
the device from the lengths (``arange`` compared with them). Induced set attention blocks
(ISAB): learned inducing points attend to the set (the padded keys masked by ``masked_fill``
with the dtype's minimum before the softmax), then the set attends back to the inducing
points; multihead attention written by hand (``view``, ``transpose``, ``matmul``), each block
``LayerNorm``-ed with a feed-forward ``rFF``. Pooling by multihead attention (PMA, learned
seed vectors attending to the masked set), a self-attention block over the seeds and a
linear head; cross-entropy with label smoothing.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

DEFAULT_SEQ_LEN = 4096  # the most points in a cloud
MIN_POINTS = 512
FEATURES = 6  # xyz and normals
CLASSES = 40


class MAB(nn.Module):
    """Multihead attention block: ``H = LN(Q + Att(Q, K)); out = LN(H + rFF(H))``."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.o = nn.Linear(dim, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.ReLU(), nn.Linear(4 * dim, dim))

    def split(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        return x.view(b, n, self.heads, d // self.heads).transpose(1, 2)

    def forward(
        self, query: torch.Tensor, keys: torch.Tensor, key_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        q, k, v = self.split(self.q(query)), self.split(self.k(keys)), self.split(self.v(keys))
        scores = torch.matmul(q, k.transpose(-1, -2)) / q.shape[-1] ** 0.5
        if key_mask is not None:
            scores = scores.masked_fill(~key_mask[:, None, None, :], torch.finfo(scores.dtype).min)
        att = torch.matmul(scores.softmax(-1), v)
        b, n = query.shape[:2]
        h = self.norm1(query + self.o(att.transpose(1, 2).reshape(b, n, -1)))
        return self.norm2(h + self.ff(h))


class ISAB(nn.Module):
    def __init__(self, dim: int, heads: int, inducing: int) -> None:
        super().__init__()
        self.inducing = nn.Parameter(torch.randn(1, inducing, dim) * dim**-0.5)
        self.to_inducing = MAB(dim, heads)
        self.to_set = MAB(dim, heads)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.to_inducing(self.inducing.expand(x.shape[0], -1, -1), x, mask)
        return self.to_set(x, h) * mask[..., None]


class SetTransformer(nn.Module):
    def __init__(
        self, dim: int = 256, heads: int = 8, inducing: int = 64, blocks: int = 4, seeds: int = 4
    ) -> None:
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(FEATURES, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.encoder = nn.ModuleList(ISAB(dim, heads, inducing) for _ in range(blocks))
        self.seeds = nn.Parameter(torch.randn(1, seeds, dim) * dim**-0.5)
        self.pool = MAB(dim, heads)
        self.decoder = MAB(dim, heads)
        self.head = nn.Linear(seeds * dim, CLASSES)

    def forward(self, points: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        n = points.shape[1]
        mask = torch.arange(n, device=points.device)[None] < lengths[:, None]
        x = self.embed(points) * mask[..., None]
        for block in self.encoder:
            x = block(x, mask)
        pooled = self.pool(self.seeds.expand(x.shape[0], -1, -1), x, mask)
        pooled = self.decoder(pooled, pooled)
        return self.head(pooled.flatten(1))


def make_model() -> nn.Module:
    return SetTransformer()


def make_batch(
    batch_size: int, seq_len: int | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n = seq_len or DEFAULT_SEQ_LEN
    lengths = torch.randint(min(MIN_POINTS, n), n + 1, (batch_size,))
    lengths[0] = n
    points = torch.randn(batch_size, n, FEATURES)
    points = points * (torch.arange(n)[None] < lengths[:, None])[..., None]
    return points, lengths, torch.randint(0, CLASSES, (batch_size,))


def loss_fn(
    model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    points, lengths, labels = batch
    return F.cross_entropy(model(points, lengths), labels, label_smoothing=0.2)
