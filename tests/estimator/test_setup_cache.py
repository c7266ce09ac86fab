"""The note for a training loop that keeps what building the model left cached."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import memfit
from memfit._gpus import resolve_gpu
from memfit.estimator._setup_cache import kept_setup_peak, setup_cached
from memfit.trace import trace_workload
from memfit.workload import make_workload

MiB = 2**20


class ScratchAtBuild(nn.Module):
    """Makes and drops a 64 MiB layer while it is built; every block of its step is larger (no
    matrix product: cuBLAS's 32 MiB workspace would fit the kept segment)."""

    def __init__(self) -> None:
        super().__init__()
        self.scratch = nn.Linear(4096, 4096, bias=False)  # 64 MiB, dropped below
        del self.scratch
        self.scale = nn.Parameter(torch.ones(8192, 4096))  # 128 MiB

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


def _loss(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    return model(batch).float().pow(2).mean()


def _batch() -> torch.Tensor:
    return torch.randn(8192, 4096)


def test_a_model_that_leaves_a_segment_cached_at_build_is_noted_with_the_kept_peak():
    estimate = memfit.estimate(ScratchAtBuild, _batch, gpu="h200", loss_fn=_loss)
    notes = [n for n in estimate.notes if n.startswith("building the model leaves")]
    assert len(notes) == 1
    workload = make_workload(ScratchAtBuild, _batch, gpu="h200", loss_fn=_loss)
    trace = trace_workload(workload, resolve_gpu("h200"))
    assert setup_cached(trace, workload.allocator) == 64 * MiB
    kept = kept_setup_peak(trace, workload.allocator)
    # the kept 64 MiB segment serves none of the step's blocks: the peak is that much higher
    assert kept == estimate.peak_reserved + 64 * MiB
    assert "64.00 MiB cached" in notes[0] and "(+64.00 MiB)" in notes[0]
    assert "torch.cuda.empty_cache()" in notes[0]


def test_a_model_whose_build_leaves_nothing_that_raises_the_peak_gets_no_note():
    pytest.importorskip("torchvision")
    estimate = memfit.estimate("tv:resnet18", gpu="h200", batch_size=8)
    assert not [n for n in estimate.notes if n.startswith("building the model leaves")]
