"""An attentional LSTM encoder-decoder for translation, as user code:
``lstm_seq2seq.py:make_model``.

Source sentences of varied lengths run through a two-layer bidirectional ``nn.LSTM`` as a
packed sequence (``pack_padded_sequence`` unsorted, ``pad_packed_sequence`` back); the final
states bridged into the decoder's. The decoder is an ``nn.LSTMCell`` stepped in a Python loop
over the target with teacher forcing and input feeding (the previous attentional vector
joined to the embedding): at each step additive (Bahdanau) attention over the encoder states,
``tanh`` of the projected query plus the projected keys, scored, the source padding
``masked_fill``-ed before the softmax and the context taken by ``bmm``. The attentional
vectors of all steps are stacked and projected to the target vocabulary; cross-entropy
ignoring the target padding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

SRC_VOCAB = 32000
TGT_VOCAB = 32000
DEFAULT_SEQ_LEN = 128
PAD = 0


class Seq2Seq(nn.Module):
    def __init__(self, emb: int = 512, hidden: int = 512, att: int = 512) -> None:
        super().__init__()
        self.src_embed = nn.Embedding(SRC_VOCAB, emb, padding_idx=PAD)
        self.tgt_embed = nn.Embedding(TGT_VOCAB, emb, padding_idx=PAD)
        self.encoder = nn.LSTM(emb, hidden, num_layers=2, bidirectional=True, batch_first=True)
        self.bridge_h = nn.Linear(2 * hidden, hidden)
        self.bridge_c = nn.Linear(2 * hidden, hidden)
        self.cell = nn.LSTMCell(emb + hidden, hidden)
        self.key = nn.Linear(2 * hidden, att, bias=False)
        self.query = nn.Linear(hidden, att)
        self.score = nn.Linear(att, 1, bias=False)
        self.combine = nn.Linear(hidden + 2 * hidden, hidden, bias=False)
        self.out = nn.Linear(hidden, TGT_VOCAB)
        self.hidden = hidden

    def forward(
        self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor
    ) -> torch.Tensor:
        packed = pack_padded_sequence(
            self.src_embed(src), src_lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        enc, (h_n, c_n) = self.encoder(packed)
        enc, _ = pad_packed_sequence(enc, batch_first=True, total_length=src.shape[1])
        src_mask = torch.arange(src.shape[1], device=src.device)[None] < src_lengths[:, None]
        h = torch.tanh(self.bridge_h(torch.cat([h_n[-2], h_n[-1]], -1)))
        c = torch.tanh(self.bridge_c(torch.cat([c_n[-2], c_n[-1]], -1)))
        keys = self.key(enc)  # (b, s, att)
        feed = h.new_zeros(src.shape[0], self.hidden)
        emb = self.tgt_embed(tgt_in)
        outputs = []
        for t in range(tgt_in.shape[1]):
            h, c = self.cell(torch.cat([emb[:, t], feed], -1), (h, c))
            scores = self.score(torch.tanh(keys + self.query(h)[:, None])).squeeze(-1)
            scores = scores.masked_fill(~src_mask, float("-inf"))
            weights = scores.float().softmax(-1).type_as(enc)
            context = torch.bmm(weights[:, None], enc).squeeze(1)
            feed = torch.tanh(self.combine(torch.cat([h, context], -1)))
            outputs.append(feed)
        return self.out(torch.stack(outputs, 1))


def make_model() -> nn.Module:
    return Seq2Seq()


def make_batch(batch_size: int, seq_len: int | None) -> dict[str, torch.Tensor]:
    n = seq_len or DEFAULT_SEQ_LEN
    # seeded: every call (each step, the CPU's estimate and the GPU's run) gets the same
    # lengths, on which the packed encoder's memory depends
    gen = torch.Generator().manual_seed(5206)
    src_lengths = torch.randint(n // 4, n + 1, (batch_size,), generator=gen)
    src_lengths[0] = n
    src = torch.randint(1, SRC_VOCAB, (batch_size, n), generator=gen)
    src[torch.arange(n)[None, :] >= src_lengths[:, None]] = PAD
    tgt_lengths = (src_lengths * 1.1).long().clamp(max=n + 1)
    tgt = torch.randint(1, TGT_VOCAB, (batch_size, n + 1), generator=gen)
    tgt[torch.arange(n + 1)[None, :] >= tgt_lengths[:, None]] = PAD
    return {"src": src, "src_lengths": src_lengths, "tgt": tgt}


def loss_fn(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    tgt = batch["tgt"]
    logits = model(batch["src"], batch["src_lengths"], tgt[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1).float(), tgt[:, 1:].flatten(), ignore_index=PAD)
