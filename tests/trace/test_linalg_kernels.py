"""Distance backwards' per-pair buffers and Cholesky solves' factor copies
(``memfit.trace._linalg``), as an H100 (torch 2.11) allocated them in the op sweep
(benchmarks/results/2026-12-06-h100-op-sweep)."""

from __future__ import annotations

import torch
from tests.op_sweep_support import Op as _Op
from tests.op_sweep_support import SampleInput, trace_case


def _allocs(fn, x, *args, direction="forward", **kwargs):
    got = trace_case(_Op(fn), SampleInput(x, args=args, kwargs=kwargs), direction)
    return [e[2] for e in got["events"] if e[0] == "a"]


def test_pdist_backward_takes_a_buffer_per_pair_partner():
    # H100: pdist of (640, 640) float32 took 1,046,937,600 = 639 x 640 x 640 x 4 after its
    # 1,638,400-byte gradient
    x = torch.randn(64, 32, requires_grad=True)
    dist = 64 * 63 // 2 * 4
    got = _allocs(torch.nn.functional.pdist, x, direction="backward")
    assert got == [dist, dist, 64 * 32 * 4, 63 * 64 * 32 * 4]


def test_cdist_backward_takes_a_buffer_per_pair_for_each_input():
    # H100: cdist of (80, 80, 80) by (80, 80, 80), p=1: 163,840,000 = 80^4 x 4 per input
    x1 = torch.randn(4, 10, 8, requires_grad=True)
    x2 = torch.randn(4, 12, 8, requires_grad=True)
    got = _allocs(torch.cdist, x1, x2, 1.0, direction="backward")
    # one buffer of batch x r2 x r1 x m for each input's gradient (r1, r2 swapped)
    buffer = 4 * 12 * 10 * 8 * 4
    assert got.count(buffer) == 2 and max(got) == buffer


def test_cholesky_solve_clones_the_factor_after_its_output():
    b = torch.randn(2, 32, 32)
    factor = torch.randn(2, 32, 32).mT  # column-major already: cloned all the same
    assert _allocs(torch.cholesky_solve, b, factor) == [2 * 32 * 32 * 4] * 2
    assert _allocs(torch.cholesky_inverse, factor) == [2 * 32 * 32 * 4] * 2


def test_linalg_error_checks_take_one_byte_for_any():
    # H100, linalg.cholesky of (2, 5, 5): the factor, the infos, cuSOLVER's batched matrix
    # pointers, then infos.any()'s byte
    a = torch.randn(2, 5, 5)
    a = a @ a.mT + torch.eye(5)
    assert _allocs(torch.linalg.cholesky, a) == [200, 8, 16, 1]
    if hasattr(torch.ops.aten, "cholesky"):  # deprecated (and gone after 2.13): the same calls
        assert _allocs(torch.cholesky, a) == [200, 8, 16, 1]


def test_batched_triangular_solves_take_two_pointer_arrays():
    a, b = torch.randn(4, 5, 5).triu(), torch.randn(4, 5, 4)
    assert _allocs(torch.linalg.solve_triangular, a, b, upper=True) == [320, 32, 32]
    big = torch.randn(4, 80, 80).triu()  # few wide matrices: cuBLAS's trsm in a loop
    assert _allocs(torch.linalg.solve_triangular, big, torch.randn(4, 80, 4), upper=True) == [
        4 * 80 * 4 * 4
    ]
