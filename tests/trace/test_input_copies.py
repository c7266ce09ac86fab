"""Copies CUDA kernels make of inputs not laid out as they run: a convolution's and a softmax's."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from memfit._gpus import resolve_gpu
from memfit.trace._layouts import channels_last, conv_memory_format
from memfit.trace._tracer import trace_workload
from memfit.workload._step import Workload


def _allocs(model: nn.Module, batch: torch.Tensor) -> list[tuple[str, int]]:
    """The (op or label, bytes) of every allocation of one inference step."""
    work = Workload(
        build_model=lambda: model,
        make_batch=lambda: batch,
        loss_fn=lambda m, b: m(b).float().sum(),
        optimizer="sgd",
        precision="fp32",
        mode="infer",
    )
    tr = trace_workload(work, resolve_gpu("h200"))
    out = []
    for ev in tr.events[tr.steps_start :]:
        if ev.kind == "alloc" and ev.info is not None:
            out.append((tr.infos[ev.info].op, ev.size))
    return out


class _ChunkConv(nn.Module):
    """Convolves the first channels of a channels-last activation (efficientvit's cascade)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 6, 1)

    def forward(self, x: torch.Tensor) -> Any:
        return self.conv(x.contiguous(memory_format=torch.channels_last)[:, :4])


class _TransposedConv1d(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(8, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> Any:
        return self.conv(x.transpose(1, 2))  # (N, L, C) read as (N, C, L)


def test_a_slice_of_channels_last_channels_suggests_channels_last() -> None:
    x = torch.empty(2, 8, 5, 5, device="meta").contiguous(memory_format=torch.channels_last)
    part = x[:, :4]
    assert channels_last(part) and not part.is_contiguous(memory_format=torch.channels_last)
    assert not channels_last(torch.empty(2, 8, 5, 5, device="meta")[:, :4])
    w = torch.empty(6, 4, 1, 1, device="meta")
    assert conv_memory_format(part, w) == torch.channels_last


def test_a_convolution_copies_an_input_not_laid_out_as_it_runs() -> None:
    allocs = _allocs(_ChunkConv(), torch.randn(16, 8, 6, 6))
    copies = [i for i, (op, _) in enumerate(allocs) if op == "convolution input copy"]
    assert copies and {allocs[i][1] for i in copies} == {16 * 4 * 6 * 6 * 4}
    # one per convolution (each step), made before its output
    assert all(allocs[i + 1][0] == "convolution" for i in copies)
    assert len(copies) == sum(op == "convolution" for op, _ in allocs)


def test_a_1d_convolution_copies_a_transposed_input() -> None:
    allocs = _allocs(_TransposedConv1d(), torch.randn(16, 32, 8))
    assert ("convolution input copy", 16 * 32 * 8 * 4) in allocs


def test_a_contiguous_input_is_not_copied() -> None:
    allocs = _allocs(nn.Sequential(nn.Conv2d(8, 6, 3), nn.Softmax(-1)), torch.randn(16, 8, 6, 6))
    assert not [op for op, _ in allocs if "copy" in op]


class _SoftmaxOfTransposed(nn.Module):
    def forward(self, x: torch.Tensor) -> Any:
        return torch.softmax(x.transpose(1, 2), dim=-1)


def test_softmax_copies_a_non_contiguous_input_after_its_output() -> None:
    allocs = _allocs(_SoftmaxOfTransposed(), torch.randn(16, 64, 32))
    ops = [op for op, _ in allocs]
    i = ops.index("softmax contiguous input copy")
    assert allocs[i][1] == 16 * 64 * 32 * 4 and ops[i - 1] == "_softmax"
