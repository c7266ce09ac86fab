"""What CUDA's distance and linear algebra kernels allocate beyond their outputs.

* ``_pdist_backward`` and ``_cdist_backward`` (ATen's cuda/DistanceKernel.cu) write each pair's
  contribution to the gradient into a buffer of one row per pair partner, then sum it into the
  gradient (``sum_out``): ``(n - 1) x n x m`` elements for ``pdist`` of ``n`` points of ``m``
  features, ``batch x r2 x r1 x m`` for ``cdist`` of ``r1`` by ``r2`` points. It is the
  largest tensor of the step by far (an H100, torch 2.11: 1,046,937,600 bytes for the
  backward of ``pdist`` of 640 x 640 float32 points, whose gradient is 1,638,400), taken after
  the gradient and freed when the kernel returns. None when ``p`` is 0 or a tensor is empty.
* ``cholesky_solve`` and ``cholesky_inverse`` (BatchLinearAlgebra.cu, cuSOLVER's ``potrs`` or
  MAGMA's) solve in place on the output, which starts as a copy of the right-hand side (the
  identity for the inverse), against a batched column-major clone of the factor
  (``cloneBatchedColumnMajor``), taken after the output and freed when the kernel returns
  (H100: 819,200 bytes for a (2, 320, 320) float32 factor, even one already column-major).
* batched solves: cuBLAS's batched triangular solve (``trsmBatched``, for batches of matrices
  up to 512 wide, unless 8 or fewer are at least 64 wide) takes two device arrays of one
  pointer a matrix, to the matrices and to the right-hand sides; cuSOLVER's batched Cholesky
  (``potrfBatched``) one, to the matrices. Taken after the output, freed when the call ends
  (H100 op sweep, torch 2.11: 16 and 16 bytes for two 3 x 3 triangular solves, 16 for the
  factorization of two 5 x 5 matrices; one matrix alone takes another path, not modelled).
* ``_linalg_check_errors``, which every ``torch.linalg`` function that reports errors calls on
  its ``info`` tensor, asks ``infos.any()`` first: a one-byte result on the GPU, then read on
  the host.
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["LINALG_OPS", "linalg_scratch"]

aten = torch.ops.aten

_DISTANCE_BACKWARD = {aten._pdist_backward.default, aten._cdist_backward.default}
_FACTOR_CLONE = {
    aten.cholesky_solve.default: 1,  # (self, A, upper): A is the factor
    aten._cholesky_solve_helper.default: 1,
    aten.cholesky_inverse.default: 0,  # (self, upper): self is the factor
}
# (op, index of the triangular matrix): cuBLAS's batched trsm takes device arrays of pointers
_TRIANGULAR = {aten.linalg_solve_triangular.default: 0, aten.triangular_solve.default: 1}
_CHOLESKY = aten.linalg_cholesky_ex.default
LINALG_OPS = frozenset(
    _DISTANCE_BACKWARD
    | set(_FACTOR_CLONE)
    | set(_TRIANGULAR)
    | {aten._linalg_check_errors.default, _CHOLESKY}
)


def _nbytes(t: torch.Tensor) -> int:
    return int(t.numel()) * t.element_size()


def _distance_buffer(func: Any, args: tuple[Any, ...]) -> list[tuple[int, str]]:
    """The per-pair gradient buffer of a distance backward (see the module's doc)."""
    if func is aten._pdist_backward.default:
        grad, x, p = args[0], args[1], float(args[2])
        if p == 0.0 or grad.numel() == 0 or x.numel() == 0:
            return []
        n, m = int(x.shape[0]), int(x.shape[1])
        return [((n - 1) * n * m * x.element_size(), "pdist backward per-pair buffer")]
    grad, x1, x2, p, dist = args[0], args[1], args[2], float(args[3]), args[4]
    if p == 0.0 or grad.numel() == 0 or x1.numel() == 0 or x2.numel() == 0:
        return []
    batch = math.prod(int(n) for n in dist.shape[:-2])
    r1, r2, m = int(x1.shape[-2]), int(x2.shape[-2]), int(x1.shape[-1])
    return [(batch * r2 * r1 * m * x1.element_size(), "cdist backward per-pair buffer")]


def _pointer_arrays(func: Any, args: tuple[Any, ...]) -> list[tuple[int, str]]:
    """The device arrays of matrix pointers that cuBLAS's and cuSOLVER's batched calls take
    (module doc), for batches of more than one matrix; none where torch loops instead."""
    a = args[_TRIANGULAR.get(func, 0)]
    if not isinstance(a, torch.Tensor) or a.dim() < 2 or a.numel() == 0:
        return []
    batch, n = math.prod(int(d) for d in a.shape[:-2]), int(a.shape[-1])
    if batch <= 1:
        return []
    if func is _CHOLESKY:
        return [(8 * batch, "cuSOLVER batched Cholesky matrix pointers")]
    if (batch <= 8 and n >= 64) or n > 512:
        return []  # cuBLAS's trsm looped over the batch, or MAGMA's
    return [
        (8 * batch, "cuBLAS batched trsm pointers to the matrices"),
        (8 * batch, "cuBLAS batched trsm pointers to the right-hand sides"),
    ]


def linalg_scratch(func: Any, args: tuple[Any, ...]) -> list[tuple[int, str]]:
    """What one of :data:`LINALG_OPS` allocates after its output, freed when it returns."""
    if func in _DISTANCE_BACKWARD:
        return _distance_buffer(func, args)
    if func is aten._linalg_check_errors.default:
        infos = args[0]
        if not isinstance(infos, torch.Tensor) or infos.numel() == 0:
            return []
        return [(1, "linalg error check (infos.any())")]
    if func in _TRIANGULAR or func is _CHOLESKY:
        return _pointer_arrays(func, args)
    factor = args[_FACTOR_CLONE[func]]
    if not isinstance(factor, torch.Tensor) or factor.numel() == 0:
        return []
    return [(_nbytes(factor), "Cholesky factor cloned column-major")]
