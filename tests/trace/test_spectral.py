"""cuFFT's copies and workspaces and ``roll``'s intermediates (``memfit.trace._spectral``).

Each expected sequence is what an H100 (torch 2.11) allocated for the same call in the op sweep
(benchmarks/results/2026-12-06-h100-op-sweep)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import op_sweep_cases as cases
from op_sweep_sides import trace_case

cases.testing_importable()
from torch.testing._internal.opinfo.core import SampleInput  # noqa: E402

_X = (80, 81, 82)  # 82 = 2 x 41: a prime factor cuFFT's radix kernels do not take
_REAL = 80 * 81 * 82 * 4


class _Op:
    def __init__(self, fn):
        self.fn = fn

    def __call__(self, x, *args, **kwargs):
        return self.fn(x, *args, **kwargs)


def _allocs(fn, x, direction="forward", **kwargs):
    got = trace_case(_Op(fn), SampleInput(x, kwargs=kwargs), direction)
    return [e[2] for e in got["events"] if e[0] == "a"]


def test_real_fft_with_a_large_prime_takes_a_half_size_workspace():
    # rfft over 82 points: the one-sided output, then batch x 41 complex of workspace
    assert _allocs(torch.fft.rfft, torch.randn(_X), norm="ortho") == [80 * 81 * 42 * 8, _REAL]
    # fft of a real input: the two-sided output (complex), the same workspace
    assert _allocs(torch.fft.fft, torch.randn(_X), norm="ortho") == [2 * _REAL, _REAL]


def test_complex_fft_workspace_is_the_transform_data():
    # fft2 of a real input: the complex copy, the output, a workspace of the output's size
    assert _allocs(torch.fft.fft2, torch.randn(_X), norm="ortho") == [2 * _REAL] * 3


def test_small_prime_sizes_take_no_workspace_but_a_middle_dimension_is_copied():
    # n=10 over dim 1: the input cut to (80, 10, 82) does not collapse its batch dims (0, 2)
    # as a view, so cuFFT runs on a copy; 10 = 2 x 5 takes no workspace
    cut = 80 * 10 * 82 * 4
    got = _allocs(torch.fft.rfft, torch.randn(_X), n=10, dim=1, norm="ortho")
    assert got == [80 * 6 * 82 * 8, cut]


def test_complex_to_real_clones_its_input():
    # irfft: the complex copy of the real input, the real output, its clone of the input
    got = _allocs(torch.fft.irfft, torch.randn(_X), norm="ortho")
    assert got == [2 * _REAL, 80 * 81 * 162 * 4, 2 * _REAL]


def test_half_precision_strided_real_fft_takes_a_workspace():
    # a two-sided output in half precision (fft of a real (2, 8, 16) input): 16 x 8 complex
    # halves of workspace; the one-sided rfft of the same input takes none
    x = torch.randn(2, 8, 16, dtype=torch.float16)
    assert _allocs(torch.fft.fft, x, norm="ortho") == [1024, 512]
    assert _allocs(torch.fft.rfft, x, norm="ortho") == [576]


def test_fftshift_rolls_one_dimension_at_a_time():
    x = torch.randn(9, 10)
    assert _allocs(torch.fft.fftshift, x) == [360, 360]
    assert _allocs(torch.roll, x, shifts=1, dims=0) == [360]


def test_transforms_over_leading_dimensions_run_as_several_plans():
    # rfftn over (0, 1, 2): the last dimension real-to-complex into the output, a second
    # buffer, then (0, 1) complex-to-complex from a half-precision input whose innermost
    # signal stride is not 1 (cloned)
    x = torch.randn(2, 8, 16, dtype=torch.float16)
    assert _allocs(torch.fft.rfftn, x, norm="ortho") == [576] * 3
    # irfftn over (0, 1, 2): the complex copy, the output, the (0, 1) part's output and its
    # clone, then the last dimension's plan clones that part (its innermost stride is not 1)
    x = torch.randn(2, 2, 33, dtype=torch.float16)
    assert _allocs(torch.fft.irfftn, x, norm="ortho") == [528, 512, 528, 528, 528]
