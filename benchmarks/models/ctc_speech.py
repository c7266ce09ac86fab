"""A QuartzNet-style speech recogniser trained with CTC, as user code:
``ctc_speech.py:make_model``.

Log-mel frames in; time-channel separable 1-d convolutions throughout (a depthwise ``Conv1d``
with ``groups`` equal to the channels, then a pointwise ``Conv1d``), ``BatchNorm1d``, ReLU and
dropout, residual connections over repeated sub-blocks through a pointwise convolution; the
first convolution strides by 2 and a dilated one near the end; per-frame log-probabilities
over characters (``log_softmax`` in float32) and ``F.ctc_loss`` with each utterance's frame
count and padded transcripts of varied lengths.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

MELS = 80
CHARS = 28  # letters, space, apostrophe; the blank is 0
DEFAULT_SEQ_LEN = 3200  # frames, 10 ms each
MAX_TARGET = 200


class Separable(nn.Sequential):
    def __init__(
        self, cin: int, cout: int, kernel: int, stride: int = 1, dilation: int = 1
    ) -> None:
        pad = dilation * (kernel - 1) // 2
        super().__init__(
            nn.Conv1d(cin, cin, kernel, stride, pad, dilation, groups=cin, bias=False),
            nn.Conv1d(cin, cout, 1, bias=False),
            nn.BatchNorm1d(cout),
        )


class JasperBlock(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: int, repeats: int = 5) -> None:
        super().__init__()
        self.subs = nn.ModuleList(
            Separable(cin if i == 0 else cout, cout, kernel) for i in range(repeats)
        )
        self.residual = nn.Sequential(nn.Conv1d(cin, cout, 1, bias=False), nn.BatchNorm1d(cout))
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for i, sub in enumerate(self.subs):
            h = sub(h)
            if i == len(self.subs) - 1:
                h = h + self.residual(x)
            h = self.drop(F.relu(h))
        return h


class QuartzNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Sequential(Separable(MELS, 256, 33, stride=2), nn.ReLU())
        plan = ((256, 256, 33), (256, 256, 39), (256, 512, 51), (512, 512, 63), (512, 512, 75))
        self.blocks = nn.Sequential(*(JasperBlock(a, b, k) for a, b, k in plan))
        self.last = nn.Sequential(
            Separable(512, 512, 87, dilation=2),
            nn.ReLU(),
            nn.Conv1d(512, 1024, 1, bias=False),
            nn.BatchNorm1d(1024),
            nn.ReLU(),
            nn.Conv1d(1024, CHARS + 1, 1),
        )

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """(B, mels, T) -> (B, chars + 1, T / 2)."""
        return self.last(self.blocks(self.first(features)))


def make_model() -> nn.Module:
    return QuartzNet()


def make_batch(batch_size: int, seq_len: int | None) -> dict[str, torch.Tensor]:
    frames = seq_len or DEFAULT_SEQ_LEN
    lengths = torch.randint(frames // 2, frames + 1, (batch_size,))
    lengths[0] = frames
    features = torch.randn(batch_size, MELS, frames)
    features = features * (torch.arange(frames) < lengths[:, None])[:, None]  # zero padding
    target_lengths = torch.randint(MAX_TARGET // 4, MAX_TARGET + 1, (batch_size,))
    targets = torch.randint(1, CHARS + 1, (batch_size, MAX_TARGET))
    return {
        "features": features,
        "lengths": lengths,
        "targets": targets,
        "target_lengths": target_lengths,
    }


def loss_fn(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    logits = model(batch["features"])  # (B, C, T')
    log_probs = F.log_softmax(logits.float(), dim=1).permute(2, 0, 1)  # (T', B, C)
    out_lengths = (batch["lengths"] + 1) // 2
    return F.ctc_loss(
        log_probs,
        batch["targets"],
        out_lengths,
        batch["target_lengths"],
        blank=0,
        zero_infinity=True,
    )
