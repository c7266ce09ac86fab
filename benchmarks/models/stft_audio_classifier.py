"""An audio classifier on a log-magnitude spectrogram, as user code:
``stft_audio_classifier.py:make_model``: ``torch.stft`` with a Hann window, ``abs`` and
``log1p``, then 1-d convolutions over time, pooling and a classifier."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SAMPLES = 4 * 16000
N_FFT = 512
HOP = 128
CLASSES = 50


class SpectrogramCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("window", torch.hann_window(N_FFT), False)
        bins = N_FFT // 2 + 1
        self.convs = nn.Sequential(
            nn.Conv1d(bins, 256, 5, padding=2),
            nn.BatchNorm1d(256),
            nn.ReLU(),
            nn.Conv1d(256, 256, 5, stride=2, padding=2),
            nn.BatchNorm1d(256),
            nn.ReLU(),
            nn.Conv1d(256, 512, 5, stride=2, padding=2),
            nn.BatchNorm1d(512),
            nn.ReLU(),
        )
        self.head = nn.Linear(512, CLASSES)

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        spec = torch.stft(wave, N_FFT, HOP, window=self.window, return_complex=True)
        h = self.convs(torch.log1p(spec.abs()))
        return self.head(h.mean(-1))


def make_model() -> nn.Module:
    return SpectrogramCNN()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(batch_size, SAMPLES), torch.randint(0, CLASSES, (batch_size,))


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y)
