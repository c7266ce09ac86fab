"""Tensors a model leaves on the CPU are placed as on a GPU: a parameter a legacy constructor
made on the CPU is moved with the model, and a CPU scalar beside CUDA tensors is read as a
number. Each estimate equals that of the same model written the plain way."""

from __future__ import annotations

import torch
from torch import nn

import memfit


class Legacy(nn.Module):
    """A parameter made by the legacy constructor, which ignores the device built under."""

    def __init__(self, legacy: bool) -> None:
        super().__init__()
        self.lin = nn.Linear(64, 64)
        self.scale = nn.Parameter(torch.Tensor(64) if legacy else torch.empty(64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.scale


class Masked(nn.Module):
    """``masked_fill`` with its value a CPU scalar tensor, as CUDA accepts it."""

    def __init__(self, cpu_scalar: bool) -> None:
        super().__init__()
        self.lin = nn.Linear(64, 64)
        self.cpu_scalar = cpu_scalar

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        value = torch.tensor(-1e4) if self.cpu_scalar else -1e4
        return y.masked_fill(y > 0, value).softmax(-1)


def _peaks(make: object) -> tuple[int, int]:
    batch = torch.randn(32, 64)
    est = memfit.estimate(make, batch, loss_fn=lambda model, b: model(b).sum(), gpu="h100")
    return est.peak_allocated, est.peak_reserved


def test_a_parameter_left_on_the_cpu_is_moved_with_the_model() -> None:
    assert _peaks(lambda: Legacy(legacy=True)) == _peaks(lambda: Legacy(legacy=False))


def test_a_cpu_scalar_beside_cuda_tensors_is_read_as_a_number() -> None:
    assert _peaks(lambda: Masked(cpu_scalar=True)) == _peaks(lambda: Masked(cpu_scalar=False))
