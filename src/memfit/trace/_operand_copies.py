"""Copies a batched matrix product makes of its inputs once its output exists, freed when it
returns.

A batched matrix product (``bmm``, ``baddbmm``) hands cuBLAS each operand as it is where one
  of its two matrix dimensions has stride 1 and the other a stride at least the matrix's
  leading size; otherwise it clones the operand to a contiguous tensor first
  (``prepare_batch_matrix_for_cublas`` in ATen's cuda/Blas.cpp, after the output is sized). An
  ``einsum`` whose operand comes from a permuted parameter makes one: the Fourier neural
  operator's ``"bixy,ioxy->boxy"`` on complex (64, 64, 16, 16) weights gives cuBLAS a
  (256, 64, 64) operand with strides (1, 16384, 256), and the H100 copies its 8,388,608 bytes
  after each 4,194,304-byte product (torch 2.11, hw-fno2d-fp32-b32).

(A complex-to-real FFT's copy of its input is ``_spectral``'s.)
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["BMMS", "bmm_operand_copies"]

aten = torch.ops.aten

BMMS = frozenset({aten.bmm.default, aten.baddbmm.default})


def _nbytes(t: torch.Tensor) -> int:
    return int(t.numel()) * t.element_size()


def _copied(t: torch.Tensor, transpose_result: bool, rows: int, cols: int) -> bool:
    """Whether ``prepare_batch_matrix_for_cublas`` clones batch operand ``t`` (a conjugate view
    resolved is a copy too)."""
    stride = t.stride()
    fast, lead = (2, 1) if transpose_result else (1, 2)
    if stride[fast] == 1 and stride[lead] >= max(1, rows):
        return t.is_conj()
    if stride[lead] == 1 and stride[fast] >= max(1, cols):
        return False  # resolve_conj_if_indicated(tensor, false): a conjugate stays a view
    if t.is_contiguous() and stride[1] != 0 and stride[2] != 0:
        return transpose_result and t.is_conj()
    return True


def bmm_operand_copies(func: Any, args: tuple[Any, ...]) -> list[tuple[int, str]]:
    """The operand copies ``baddbmm_out_cuda_impl`` makes for cuBLAS, in the order it takes
    them. Its result is new and contiguous (``baddbmm`` copies its input into it): cuBLAS
    writes it transposed unless it is one column wide, and never needs a copy of it."""
    batch1, batch2 = (args[0], args[1]) if func is aten.bmm.default else (args[1], args[2])
    if not all(isinstance(t, torch.Tensor) and t.dim() == 3 for t in (batch1, batch2)):
        return []
    rows, inner, cols = int(batch1.shape[1]), int(batch1.shape[2]), int(batch2.shape[2])
    if int(batch1.shape[0]) * rows * cols == 0 or inner == 0:
        return []  # an empty product or reduction: no cuBLAS call
    transpose_result = cols != 1
    if transpose_result:
        operands = ((batch2, cols, inner), (batch1, inner, rows))
    else:
        operands = ((batch1, rows, inner), (batch2, inner, cols))
    return [
        (_nbytes(t), "cuBLAS batched operand made contiguous")
        for t, m, n in operands
        if _copied(t, transpose_result, m, n)
    ]
