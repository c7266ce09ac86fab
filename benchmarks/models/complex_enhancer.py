"""A speech enhancer predicting a complex spectral mask, as user code:
``complex_enhancer.py:make_model``.

The noisy waveform is turned into a complex spectrogram by ``torch.stft``
(``return_complex=True``). The log magnitude runs through a bidirectional ``nn.GRU`` over
frames for temporal context; the complex spectrum itself goes through complex-valued linear
layers across frequency (``complex64`` parameters, complex ``matmul``) with modReLU
activations (``abs``, a learned threshold, the phase kept as ``z / |z|``), gated by the
GRU's real output. The result is bounded into a complex mask (``tanh`` of the magnitude,
phase kept), applied to the noisy spectrum and turned back into a waveform by
``torch.istft``. The loss is the negative scale-invariant signal-to-noise ratio against the
clean waveform.
"""

from __future__ import annotations

import torch
from torch import nn

SAMPLE_RATE = 16000
SECONDS = 4
N_FFT = 512
HOP = 128
BINS = N_FFT // 2 + 1


class ComplexLinear(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        scale = (2 * cin) ** -0.5
        self.weight = nn.Parameter(torch.randn(cin, cout, dtype=torch.cfloat) * scale)
        self.bias = nn.Parameter(torch.zeros(cout, dtype=torch.cfloat))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return z @ self.weight + self.bias


class ModReLU(nn.Module):
    def __init__(self, features: int) -> None:
        super().__init__()
        self.threshold = nn.Parameter(torch.full((features,), -0.01))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        mag = z.abs() + 1e-6
        return torch.relu(mag + self.threshold) * (z / mag)


class ComplexMaskNet(nn.Module):
    def __init__(self, hidden: int = 512, gru: int = 384) -> None:
        super().__init__()
        self.register_buffer("window", torch.hann_window(N_FFT), persistent=False)
        self.gru = nn.GRU(BINS, gru, num_layers=2, batch_first=True, bidirectional=True)
        self.gate = nn.Linear(2 * gru, hidden)
        self.c1 = ComplexLinear(BINS, hidden)
        self.a1 = ModReLU(hidden)
        self.c2 = ComplexLinear(hidden, hidden)
        self.a2 = ModReLU(hidden)
        self.c3 = ComplexLinear(hidden, BINS)

    def forward(self, noisy: torch.Tensor) -> torch.Tensor:
        spec = torch.stft(
            noisy, N_FFT, HOP, window=self.window, return_complex=True
        )  # (b, bins, frames)
        z = spec.transpose(1, 2)  # (b, frames, bins)
        context, _ = self.gru(torch.log1p(z.abs()))
        gate = torch.sigmoid(self.gate(context))
        h = self.a1(self.c1(z)) * gate
        h = self.a2(self.c2(h))
        m = self.c3(h)
        mag = m.abs() + 1e-6
        mask = torch.tanh(mag) * (m / mag)
        est = (z * mask).transpose(1, 2)
        return torch.istft(est, N_FFT, HOP, window=self.window, length=noisy.shape[-1])


def si_snr(est: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    est = est - est.mean(-1, keepdim=True)
    ref = ref - ref.mean(-1, keepdim=True)
    proj = (est * ref).sum(-1, keepdim=True) / (ref.pow(2).sum(-1, keepdim=True) + 1e-8) * ref
    noise = est - proj
    return 10 * torch.log10(proj.pow(2).sum(-1) / (noise.pow(2).sum(-1) + 1e-8) + 1e-8)


def make_model() -> nn.Module:
    return ComplexMaskNet()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    n = seq_len or SAMPLE_RATE * SECONDS
    t = torch.arange(n) / SAMPLE_RATE
    freqs = torch.rand(batch_size, 1) * 400 + 100
    clean = torch.sin(2 * torch.pi * freqs * t) * (0.5 + 0.5 * torch.sin(3 * t))
    return clean + 0.3 * torch.randn(batch_size, n), clean


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    noisy, clean = batch
    return -si_snr(model(noisy), clean).mean()
