"""Copies CUDA kernels make of their inputs after their output: a batched product's operand that
cuBLAS cannot take as it is, a complex-to-real FFT's input (H100 traces, torch 2.11,
hw-fno2d-fp32-b32)."""

from __future__ import annotations

import torch
from torch import nn

from memfit._gpus import resolve_gpu
from memfit.trace._operand_copies import bmm_operand_copies
from memfit.trace._tracer import Trace, trace_workload
from memfit.workload._step import Workload

aten = torch.ops.aten


def _meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(shape, device="meta", dtype=dtype)


def test_bmm_copies_only_an_operand_with_no_dense_matrix_dimension() -> None:
    a = _meta(256, 32, 64)
    # the FNO's weight: (i, o, x, y) permuted to (x*y, i, o), strides (1, 16384, 256)
    w = _meta(64, 64, 16, 16, dtype=torch.complex64).permute(2, 3, 0, 1).reshape(256, 64, 64)
    assert w.stride() == (1, 16384, 256)
    copies = bmm_operand_copies(aten.bmm.default, (a.to(torch.complex64), w))
    assert [n for n, _ in copies] == [8_388_608]
    # a transposed operand (a stride of 1 in a matrix dimension) goes to cuBLAS as it is
    assert bmm_operand_copies(aten.bmm.default, (a, _meta(256, 32, 64).transpose(1, 2))) == []
    assert bmm_operand_copies(aten.bmm.default, (a, _meta(256, 64, 16))) == []
    # baddbmm: the operands are its second and third arguments
    both = bmm_operand_copies(aten.baddbmm.default, (_meta(256, 64, 64), w.real, w.real))
    assert [n for n, _ in both] == [4_194_304, 4_194_304]


class _Spectral(nn.Module):
    """One Fourier layer: rfft2, an einsum on complex weights, irfft2."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8, 4, 4, dtype=torch.cfloat))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_ft = torch.fft.rfft2(x)
        out = torch.zeros(x.shape[0], 8, 16, 9, dtype=torch.cfloat, device=x.device)
        out[:, :, :4, :4] = torch.einsum("bixy,ioxy->boxy", x_ft[:, :, :4, :4], self.w)
        return torch.fft.irfft2(out, s=(16, 16))


def _trace() -> Trace:
    work = Workload(
        build_model=_Spectral,
        make_batch=lambda: torch.randn(2, 8, 16, 16),
        loss_fn=lambda m, b: m(b).sum(),
        optimizer="sgd",
        steps=1,
    )
    return trace_workload(work, resolve_gpu("h100"))


def test_a_fourier_layer_takes_both_copies_after_the_outputs() -> None:
    trace = _trace()
    allocs = [
        (trace.infos[e.info].op, e.size)
        for e in trace.events[trace.steps_start :]
        if e.kind == "alloc"
    ]
    ops = [op for op, _ in allocs]
    # forward: irfft2's (2, 8, 16, 16) float32 output, then its input's complex copy
    out = ops.index("_fft_c2r")
    assert allocs[out + 1] == (
        "FFT complex input cloned (cuFFT may overwrite it)",
        2 * 8 * 16 * 9 * 8,
    )
    # the einsum's weight operand (16, 8, 8) complex64 is copied after the product
    weight_copy = ("cuBLAS batched operand made contiguous", 16 * 8 * 8 * 8)
    first_bmm = ops.index("bmm")
    assert weight_copy in allocs[first_bmm + 1 : first_bmm + 3]
