"""A learning-to-rank model trained by sampling rankings, as user code:
``plackett_luce_ranker.py:make_model``.

Each query's candidate documents (136 features each) are scored by an MLP that also sees the
list's mean representation. Training samples 32 rankings per query from the Plackett-Luce
distribution of the scores by the Gumbel trick (noise from ``torch.distributions.Gumbel``
added to the detached scores, ``argsort``); each ranking's log-probability from the scores
``gather``-ed in its order and a reversed ``logcumsumexp`` (``flip``); its NDCG from the
relevance gains gathered in the same order over the ideal DCG (``torch.sort`` of the gains);
a REINFORCE loss with the mean over the samples as baseline.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributions import Gumbel

FEATURES = 136
DEFAULT_SEQ_LEN = 512  # candidate documents per query
SAMPLES = 32


class ListScorer(nn.Module):
    def __init__(self, hidden: int = 1024) -> None:
        super().__init__()
        self.encode = nn.Sequential(
            nn.LayerNorm(FEATURES),
            nn.Linear(FEATURES, hidden),
            nn.GELU(),
            nn.Linear(hidden, hidden),
            nn.GELU(),
        )
        self.score = nn.Sequential(
            nn.Linear(2 * hidden, hidden),
            nn.GELU(),
            nn.Dropout(0.1),
            nn.Linear(hidden, hidden // 2),
            nn.GELU(),
            nn.Linear(hidden // 2, 1),
        )

    def forward(self, docs: torch.Tensor) -> torch.Tensor:
        """(Q, D, features) -> (Q, D) scores."""
        h = self.encode(docs)
        context = h.mean(1, keepdim=True).expand_as(h)
        return self.score(torch.cat([h, context], -1)).squeeze(-1)


def make_model() -> nn.Module:
    return ListScorer()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    docs = seq_len or DEFAULT_SEQ_LEN
    labels = torch.randint(0, 5, (batch_size, docs)) * (torch.rand(batch_size, docs) < 0.3)
    return torch.randn(batch_size, docs, FEATURES), labels


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    docs, labels = batch
    scores = model(docs).float()  # (Q, D)
    q, d = scores.shape
    gumbel = Gumbel(scores.new_zeros(()), scores.new_ones(()))
    noise = gumbel.sample((q, SAMPLES, d))
    rankings = torch.argsort(scores.detach()[:, None] + noise, dim=-1, descending=True)

    ordered = scores[:, None].expand(q, SAMPLES, d).gather(-1, rankings)
    remaining = torch.logcumsumexp(ordered.flip(-1), dim=-1).flip(-1)
    log_prob = (ordered - remaining).sum(-1)  # (Q, S)

    gains = 2.0 ** labels.float() - 1
    discount = 1 / torch.log2(torch.arange(d, device=scores.device, dtype=torch.float32) + 2)
    dcg = (gains[:, None].expand(q, SAMPLES, d).gather(-1, rankings) * discount).sum(-1)
    ideal = (torch.sort(gains, dim=-1, descending=True).values * discount).sum(-1)
    ndcg = dcg / ideal.clamp(min=1e-6)[:, None]
    advantage = (ndcg - ndcg.mean(1, keepdim=True)).detach()
    return -(advantage * log_prob).mean()
