"""An FNet text classifier (token mixing by Fourier transforms, no attention), as user code:
``fnet_mixer.py:make_model``.

Documents of varied lengths padded to the longest; the padded positions are zeroed after the
embedding. Each block mixes tokens by a two-dimensional discrete Fourier transform written as
two ``torch.fft.fft`` calls (over the hidden size, then over the sequence) in float32, keeps
the real part and casts back, then a post-norm GELU feed-forward. Every other block is run
under ``torch.utils.checkpoint`` (``use_reentrant=False``) by hand. Masked mean pooling over
the real tokens and a linear head; cross-entropy.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

VOCAB = 30522
DEFAULT_SEQ_LEN = 1024
CLASSES = 20


class FourierBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.norm2 = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mixed = torch.fft.fft(torch.fft.fft(x.float(), dim=-1), dim=-2).real.type_as(x)
        x = self.norm1(x + mixed)
        return self.norm2(x + self.ff(x))


class FNet(nn.Module):
    def __init__(self, dim: int = 768, depth: int = 12) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, dim, padding_idx=0)
        self.pos = nn.Embedding(4096, dim)
        self.norm = nn.LayerNorm(dim)
        self.blocks = nn.ModuleList(FourierBlock(dim) for _ in range(depth))
        self.head = nn.Linear(dim, CLASSES)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        n = ids.shape[1]
        positions = torch.arange(n, device=ids.device)
        mask = (positions[None] < lengths[:, None]).unsqueeze(-1)
        x = self.norm(self.tok(ids) + self.pos(positions)[None]) * mask
        for i, block in enumerate(self.blocks):
            x = checkpoint(block, x, use_reentrant=False) if i % 2 == 0 else block(x)
            x = x * mask
        pooled = x.sum(1) / lengths[:, None].to(x.dtype)
        return self.head(pooled)


def make_model() -> nn.Module:
    return FNet()


def make_batch(batch_size: int, seq_len: int | None) -> dict[str, torch.Tensor]:
    n = seq_len or DEFAULT_SEQ_LEN
    lengths = torch.randint(n // 4, n + 1, (batch_size,))
    lengths[0] = n
    ids = torch.randint(1, VOCAB, (batch_size, n))
    ids[torch.arange(n)[None, :] >= lengths[:, None]] = 0
    return {"ids": ids, "lengths": lengths, "y": torch.randint(0, CLASSES, (batch_size,))}


def loss_fn(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return F.cross_entropy(model(batch["ids"], batch["lengths"]), batch["y"])
