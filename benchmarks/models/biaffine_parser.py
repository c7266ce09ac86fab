"""A graph-based dependency parser with biaffine attention, as user code:
``biaffine_parser.py:make_model``.

Dozat & Manning's parser: word (50,000-word vocabulary) and part-of-speech embeddings feed a
three-layer bidirectional ``nn.LSTM`` with ``proj_size`` (hidden 800, each direction's output
projected to 300 by the LSTM's own projection matrices). Four MLPs give arc-dependent,
arc-head, label-dependent and label-head vectors. Arc scores for every (dependent, head)
pair come from a biaffine product written with ``einsum`` (a bias column appended to the
dependent vectors by ``F.pad``); padded head positions are masked with ``masked_fill``.
Labels are scored by ``nn.Bilinear`` between each word's label-dependent vector and the
label-head vector of its gold head, picked out by ``gather``. Loss: cross-entropy over heads
and over the 48 relation labels, on the real (unpadded) words only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

WORDS = 50000
TAGS = 50
RELS = 48
DEFAULT_SEQ_LEN = 64
PAD = 0


def mlp(dim_in: int, dim_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(dim_in, dim_out), nn.LeakyReLU(0.1), nn.Dropout(0.33))


class BiaffineParser(nn.Module):
    def __init__(self, hidden: int = 800, proj: int = 300, arc: int = 500, rel: int = 100):
        super().__init__()
        self.words = nn.Embedding(WORDS, 100, padding_idx=PAD)
        self.tags = nn.Embedding(TAGS, 100, padding_idx=PAD)
        self.lstm = nn.LSTM(
            200,
            hidden,
            num_layers=3,
            batch_first=True,
            bidirectional=True,
            dropout=0.33,
            proj_size=proj,
        )
        self.arc_dep, self.arc_head = mlp(2 * proj, arc), mlp(2 * proj, arc)
        self.rel_dep, self.rel_head = mlp(2 * proj, rel), mlp(2 * proj, rel)
        self.arc_weight = nn.Parameter(torch.zeros(arc + 1, arc))
        self.rel_bilinear = nn.Bilinear(rel, rel, RELS)

    def forward(
        self, words: torch.Tensor, tags: torch.Tensor, heads: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([self.words(words), self.tags(tags)], -1)
        h, _ = self.lstm(x)
        dep = F.pad(self.arc_dep(h), (0, 1), value=1.0)
        arc_scores = torch.einsum("bid,de,bje->bij", dep, self.arc_weight, self.arc_head(h))
        arc_scores = arc_scores.masked_fill((words == PAD)[:, None, :], -1e9)
        rel_head = self.rel_head(h)
        gold = rel_head.gather(1, heads[..., None].expand(-1, -1, rel_head.shape[-1]))
        rel_scores = self.rel_bilinear(self.rel_dep(h).contiguous(), gold.contiguous())
        return arc_scores, rel_scores


def make_model() -> nn.Module:
    return BiaffineParser()


def make_batch(
    batch_size: int, seq_len: int | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    seq_len = seq_len or DEFAULT_SEQ_LEN
    gen = torch.Generator().manual_seed(7206)
    lengths = torch.randint(seq_len // 3, seq_len + 1, (batch_size,), generator=gen)
    lengths[0] = seq_len
    pad = torch.arange(seq_len)[None] >= lengths[:, None]
    words = torch.randint(1, WORDS, (batch_size, seq_len), generator=gen).masked_fill(pad, PAD)
    tags = torch.randint(1, TAGS, (batch_size, seq_len), generator=gen).masked_fill(pad, PAD)
    heads = (torch.rand(batch_size, seq_len, generator=gen) * lengths[:, None]).long()
    rels = torch.randint(0, RELS, (batch_size, seq_len), generator=gen)
    return words, tags, heads.masked_fill(pad, 0), rels.masked_fill(pad, -100)


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    words, tags, heads, rels = batch
    arc_scores, rel_scores = model(words, tags, heads)
    real = words != PAD
    arc_loss = F.cross_entropy(arc_scores[real].float(), heads[real])
    rel_loss = F.cross_entropy(rel_scores.flatten(0, 1).float(), rels.flatten())
    return arc_loss + rel_loss
