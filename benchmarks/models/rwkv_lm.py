"""An RWKV-style language model in pure PyTorch, as user code: ``rwkv_lm.py:make_model``.

No attention: every block has a time-mix (token shift by ``F.pad`` and a slice, learned
interpolation with the previous token, receptance, key and value projections) and a
channel-mix (squared ReLU, sigmoid gate). The WKV linear-attention recurrence (a per-channel
exponential decay and a bonus for the current token) is computed in float32 with autocast
turned off, chunk by chunk in a Python loop over time: within a chunk by a decay tensor of
shape (chunk, chunk, channels) built from ``arange`` differences, ``exp`` and ``tril``, and
``einsum``; across chunks by a numerator and denominator state carried in the loop. The
keys are clamped before ``exp``. The loss is label-smoothed cross-entropy over the 50,277
token vocabulary computed a slice of tokens at a time, each slice's head and loss run under
``torch.utils.checkpoint`` (``use_reentrant=False``) so only one slice's logits live at once.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

VOCAB = 50277
DEFAULT_SEQ_LEN = 1024
CHUNK = 64
LOSS_SLICE = 2048  # tokens per slice of the output head


def wkv(
    w: torch.Tensor, u: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk: int = CHUNK
) -> torch.Tensor:
    """w (C,) negative log-decays, u (C,) bonus, k and v (B, T, C) -> (B, T, C)."""
    b, t, c = k.shape
    ek = torch.exp(k.clamp(max=30.0))
    ekv = ek * v
    idx = torch.arange(chunk, device=k.device, dtype=k.dtype)
    gap = idx[:, None] - idx[None, :] - 1  # (L, L): i - j - 1
    below = torch.tril(torch.ones(chunk, chunk, device=k.device, dtype=torch.bool), -1)
    decay = torch.exp(gap[..., None].clamp(min=0) * w) * below[..., None]  # (L, L, C)
    into_state = torch.exp((chunk - 1 - idx)[:, None] * w)  # (L, C)
    from_state = torch.exp(idx[:, None] * w)  # (L, C)
    chunk_decay = torch.exp(chunk * w)  # (C,)
    bonus = torch.exp(u)
    num = k.new_zeros(b, c)
    den = k.new_zeros(b, c)
    outs = []
    for s in range(0, t, chunk):
        ek_c, ekv_c = ek[:, s : s + chunk], ekv[:, s : s + chunk]
        size = ek_c.shape[1]  # the last chunk may be short
        n = (
            torch.einsum("ijc,bjc->bic", decay[:size, :size], ekv_c)
            + from_state[:size] * num[:, None]
        )
        d = (
            torch.einsum("ijc,bjc->bic", decay[:size, :size], ek_c)
            + from_state[:size] * den[:, None]
        )
        outs.append((n + bonus * ekv_c) / (d + bonus * ek_c))
        if s + chunk >= t:
            break
        num = chunk_decay * num + (into_state * ekv_c).sum(1)
        den = chunk_decay * den + (into_state * ek_c).sum(1)
    return torch.cat(outs, 1)


def shift(x: torch.Tensor) -> torch.Tensor:
    """Each position's previous token (zeros before the first)."""
    return F.pad(x, (0, 0, 1, 0))[:, :-1]


class TimeMix(nn.Module):
    def __init__(self, dim: int, layer: int, layers: int) -> None:
        super().__init__()
        ratio = 1 - layer / layers
        ramp = torch.arange(dim) / dim
        self.decay = nn.Parameter(-5 + 8 * ramp ** (0.7 + 1.3 * layer / layers))
        self.first = nn.Parameter(torch.full((dim,), 0.5) + ramp)
        self.mix_k = nn.Parameter(ramp**ratio)
        self.mix_v = nn.Parameter(ramp**ratio + 0.3 * layer / layers)
        self.mix_r = nn.Parameter(ramp ** (0.5 * ratio))
        self.key = nn.Linear(dim, dim, bias=False)
        self.value = nn.Linear(dim, dim, bias=False)
        self.receptance = nn.Linear(dim, dim, bias=False)
        self.output = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        prev = shift(x)
        k = self.key(x * self.mix_k + prev * (1 - self.mix_k))
        v = self.value(x * self.mix_v + prev * (1 - self.mix_v))
        r = self.receptance(x * self.mix_r + prev * (1 - self.mix_r))
        with torch.autocast("cuda", enabled=False):
            y = wkv(-torch.exp(self.decay.float()), self.first.float(), k.float(), v.float())
        return self.output(torch.sigmoid(r) * y)


class ChannelMix(nn.Module):
    def __init__(self, dim: int, layer: int, layers: int) -> None:
        super().__init__()
        ramp = (torch.arange(dim) / dim) ** (1 - layer / layers)
        self.mix_k = nn.Parameter(ramp.clone())
        self.mix_r = nn.Parameter(ramp.clone())
        self.key = nn.Linear(dim, 4 * dim, bias=False)
        self.receptance = nn.Linear(dim, dim, bias=False)
        self.value = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        prev = shift(x)
        k = torch.square(torch.relu(self.key(x * self.mix_k + prev * (1 - self.mix_k))))
        r = torch.sigmoid(self.receptance(x * self.mix_r + prev * (1 - self.mix_r)))
        return r * self.value(k)


class Block(nn.Module):
    def __init__(self, dim: int, layer: int, layers: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.ln2 = nn.LayerNorm(dim)
        self.att = TimeMix(dim, layer, layers)
        self.ffn = ChannelMix(dim, layer, layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.att(self.ln1(x))
        return x + self.ffn(self.ln2(x))


class RWKV(nn.Module):
    def __init__(self, dim: int = 1024, layers: int = 12) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, dim)
        self.ln0 = nn.LayerNorm(dim)
        self.blocks = nn.ModuleList(Block(dim, i, layers) for i in range(layers))
        self.ln_out = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, VOCAB, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """The final hidden states; the head is applied in the loss, a slice at a time."""
        x = self.ln0(self.emb(ids))
        for block in self.blocks:
            x = block(x)
        return self.ln_out(x)


def slice_loss(weight: torch.Tensor, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = F.linear(hidden, weight)
    return F.cross_entropy(logits.float(), targets, label_smoothing=0.1, reduction="sum")


def make_model() -> nn.Module:
    return RWKV()


def make_batch(batch_size: int, seq_len: int | None) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch_size, (seq_len or DEFAULT_SEQ_LEN) + 1))


def loss_fn(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    hidden = model(batch[:, :-1]).flatten(0, 1)
    targets = batch[:, 1:].flatten()
    total = hidden.new_zeros((), dtype=torch.float32)
    for h, y in zip(hidden.split(LOSS_SLICE), targets.split(LOSS_SLICE), strict=True):
        total = total + checkpoint(slice_loss, model.head.weight, h, y, use_reentrant=False)
    return total / targets.numel()
