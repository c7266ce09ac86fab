"""What PyTorch's cuFFT-backed FFT kernels and ``roll`` allocate beyond their outputs.

``torch.fft.*`` reaches three ATen ops, ``_fft_r2c``, ``_fft_c2r`` and ``_fft_c2c``, whose CUDA
kernels (ATen's cuda/SpectralOps.cpp, torch 2.11) allocate their output and then run one or more
cuFFT plans (``_exec_fft``), each of which may take, through the caching allocator and freed
when the plan has run:

* a copy of its input: the batch dimensions (those not transformed, ordered by stride) are
  collapsed into one with ``reshape``, which copies when they do not collapse as a view (a
  transform over a middle dimension); then the plan may ask for a contiguous clone
  (``CuFFTConfig::should_clone_input``: strides cuFFT cannot embed, or half precision whose
  innermost signal stride is not 1);
* cuFFT's workspace (``cufftSetWorkArea`` on ``at::empty``). Its size is cuFFT's own. On an
  H100 (torch 2.11, cuFFT 12) a transform whose sizes are all products of 2, 3, 5 and 7 took
  none, one with a larger prime factor (82 = 2 x 41) took one as large as the transform's data
  in complex form: ``batch x n`` complex elements for complex-to-complex, ``batch x n / 2``
  for real-to-complex and complex-to-real. A half-precision real-to-complex or complex-to-real
  plan whose layout is not plain (a strided input, a two-sided output) took one of the same
  size whatever its sizes; a complex-to-complex one did not. That is the rule here.

Around the plans: ``_fft_r2c`` clones an input whose address is not aligned to a complex
element (an odd storage offset); ``_fft_c2r`` always clones its input (cuFFT may overwrite it);
transforms over more than three dimensions, and real ones whose dimensions start with (0, 1),
run as several plans through a second buffer of the output's size.

``roll`` over several dimensions rolls one dimension at a time (``roll_common``), each into a
new tensor, and rolls a non-contiguous input's contiguous copy: ``fftshift`` of a 2-d tensor
allocates two tensors of its size where the meta kernel makes one.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import torch

from memfit.trace._scratch import Scratch

__all__ = ["FFT_OPS", "fft_scratch", "roll_temporaries"]

aten = torch.ops.aten

FFT_OPS = frozenset({aten._fft_r2c.default, aten._fft_c2r.default, aten._fft_c2c.default})

_MAX_PLAN_DIMS = 3  # cufft_max_ndim


@dataclass(frozen=True)
class _Layout:
    """A tensor's sizes and strides (in elements) and the bytes of one element."""

    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    itemsize: int
    offset: int = 0  # storage offset, in elements

    @property
    def nbytes(self) -> int:
        return math.prod(self.sizes) * self.itemsize


def _contiguous_strides(sizes: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(sizes):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _strides_in_order(sizes: tuple[int, ...], order: list[int]) -> tuple[int, ...]:
    """Strides of a tensor of ``sizes`` laid out contiguously with its dimensions in ``order``
    (outermost first)."""
    permuted = _contiguous_strides(tuple(sizes[d] for d in order))
    strides = [0] * len(sizes)
    for d, st in zip(order, permuted, strict=True):
        strides[d] = st
    return tuple(strides)


def _large_prime_factor(n: int) -> bool:
    """Whether ``n`` has a prime factor above 7 (cuFFT's radix kernels take 2, 3, 5 and 7)."""
    for p in (2, 3, 5, 7):
        while n > 1 and n % p == 0:
            n //= p
    return n > 1


def _collapses(sizes: list[int], strides: list[int]) -> bool:
    """Whether dimensions (outermost first) merge into one as a view."""
    dims = [(n, st) for n, st in zip(sizes, strides, strict=True) if n != 1]
    return all(a[1] == b[1] * b[0] for a, b in itertools.pairwise(dims))


def _simple(strides: list[int], batch: int, sizes: list[int]) -> bool:
    """Whether cuFFT sees a plain layout (``CuFFTDataLayout::simple``): the signal contiguous,
    one signal after another."""
    step = 1
    for n, st in zip(reversed(sizes), reversed(strides[1:]), strict=True):
        if n != 1 and st != step:
            return False
        step *= n
    return batch == 1 or strides[0] == step


def _must_clone(strides: list[int], batch: int, half: bool) -> bool:
    """``CuFFTConfig``'s clone of the (batch-collapsed) input: half precision needs a unit
    innermost stride; otherwise strides cuFFT's embedding cannot express (``as_cufft_embed``)."""
    last = strides[-1]
    if half and last != 1:
        return True
    if last <= 0 or (batch != 1 and strides[0] == 0):
        return True
    for st in reversed(strides[1:-1]):
        if st <= 0 or st % last:
            return True
        last = st
    return False


def _exec_fft(
    x: _Layout, out_sizes: tuple[int, ...], dims: list[int], kind: str, out_itemsize: int
) -> tuple[list[Scratch], tuple[int, ...]]:
    """One ``_exec_fft``: its input copies and workspace, and the strides it leaves its output
    with (contiguous in the order batch dimensions by stride, then the transformed ones)."""
    ndim = len(x.sizes)
    batch_dims = sorted((d for d in range(ndim) if d not in dims), key=lambda d: -x.strides[d])
    order = batch_dims + list(dims)
    items: list[Scratch] = []
    batch = math.prod(x.sizes[d] for d in batch_dims)
    if _collapses([x.sizes[d] for d in batch_dims], [x.strides[d] for d in batch_dims]):
        inner = [x.strides[d] for d in batch_dims if x.sizes[d] != 1]
        strides = [inner[-1] if inner else 1] + [x.strides[d] for d in dims]
    else:
        items.append((x.nbytes, "FFT input with its batch dimensions collapsed (reshape copy)"))
        strides = list(_contiguous_strides((batch, *(x.sizes[d] for d in dims))))
    real = x.itemsize if kind == "r2c" else out_itemsize if kind == "c2r" else x.itemsize // 2
    cloned = _must_clone(strides, batch, real == 2)
    if cloned:
        items.append((x.nbytes, "FFT input cloned for cuFFT's layout"))
        strides = list(_contiguous_strides((batch, *(x.sizes[d] for d in dims))))
    signal = [max(x.sizes[d], out_sizes[d]) for d in dims]
    # the output is contiguous; only a two-sided real-to-complex one is not laid out as cuFFT's
    # one-sided result would be
    simple = _simple(strides, batch, [x.sizes[d] for d in dims]) and (
        kind != "r2c" or out_sizes[dims[-1]] == signal[-1] // 2 + 1
    )
    strided_half = real == 2 and kind != "c2c" and not simple
    if strided_half or any(_large_prime_factor(n) for n in signal):
        points = math.prod(signal[:-1]) * (signal[-1] if kind == "c2c" else signal[-1] // 2)
        items.append((batch * points * 2 * real, "cuFFT workspace"))
    return items, _strides_in_order(out_sizes, order)


def _optimized(dims: list[int]) -> bool:
    """``use_optimized_cufft_path``: one plan for a real transform."""
    return len(dims) <= _MAX_PLAN_DIMS and dims[:2] != [0, 1]


def _c2c_steps(x: _Layout, dims: list[int]) -> tuple[list[list[Scratch]], tuple[int, ...]]:
    """``_fft_c2c_cufft``'s plans, three dimensions at a time (the innermost by stride first),
    as one group of scratch each; and the strides its output is left with."""
    groups: list[list[Scratch]] = []
    left, cur = list(dims), x
    while left:
        left.sort(key=lambda d: -cur.strides[d])
        take, left = left[-_MAX_PLAN_DIMS:], left[:-_MAX_PLAN_DIMS]
        items, strides = _exec_fft(cur, x.sizes, take, "c2c", x.itemsize)
        groups.append(items)
        cur = _Layout(x.sizes, strides, x.itemsize)
    return groups, cur.strides


def _with_buffer(groups: list[list[Scratch]], at: int, item: Scratch) -> list[list[Scratch]]:
    """``groups`` with a buffer allocated at the start of group ``at`` and held to the end."""
    if len(groups) <= at:
        return groups
    groups = [*groups[:at], [item, *groups[at]], *groups[at + 1 :]]
    return _fold(groups, at)


def _r2c(x: _Layout, dims: list[int], onesided: bool) -> list[list[Scratch]]:
    last = dims[-1]
    half = list(x.sizes)
    half[last] = x.sizes[last] // 2 + 1
    out_sizes = tuple(half) if onesided else x.sizes
    csize = 2 * x.itemsize
    groups: list[list[Scratch]] = []
    work = x
    if x.offset % 2:  # cuFFT wants real input aligned as if it were complex
        groups.append([(x.nbytes, "FFT real input aligned to a complex element (clone)", True)])
        order = [d for d in range(len(x.sizes)) if d != last] + [last]
        work = _Layout(x.sizes, _strides_in_order(x.sizes, order), x.itemsize)
    if _optimized(dims):
        groups.append(_exec_fft(work, out_sizes, dims, "r2c", csize)[0])
        return groups
    first = out_sizes if len(dims) == 1 else tuple(half)
    items, mid_strides = _exec_fft(work, first, [last], "r2c", csize)
    groups.append(items)
    mid = _Layout(tuple(half), mid_strides, csize)
    buffer = (math.prod(out_sizes) * csize, "FFT second working buffer", True)
    return groups + _with_buffer(_c2c_steps(mid, dims[:-1])[0], 0, buffer)


def _c2r(x: _Layout, dims: list[int], last_size: int, out_itemsize: int) -> list[list[Scratch]]:
    out_sizes = list(x.sizes)
    out_sizes[dims[-1]] = last_size
    clone = (x.nbytes, "FFT complex input cloned (cuFFT may overwrite it)", True)
    contiguous = _Layout(x.sizes, _contiguous_strides(x.sizes), x.itemsize)
    if _optimized(dims):
        items = _exec_fft(contiguous, tuple(out_sizes), dims, "c2r", out_itemsize)[0]
        return [[clone], items]
    if len(dims) > 1:
        part = (x.nbytes, "FFT complex-to-complex part's output", True)
        steps, strides = _c2c_steps(x, dims[:-1])
        steps = _with_buffer(steps, 0, part)
        temp = _Layout(x.sizes, strides, x.itemsize)
    else:
        steps, temp = [[clone]], contiguous
    items = _exec_fft(temp, tuple(out_sizes), [dims[-1]], "c2r", out_itemsize)[0]
    return [*steps, items]


def _fold(groups: list[list[Scratch]], at: int) -> list[list[Scratch]]:
    """Groups after ``at`` taken as one with ``at``, so that a buffer held from ``at`` lives to
    the end (a held item lives only into the next group): an upper bound where more plans follow
    (transforms of more than four dimensions)."""
    if len(groups) <= at + 2:
        return groups
    merged: list[Scratch] = [(item[0], item[1], True) for g in groups[at:] for item in g]
    return [*groups[:at], merged]


def fft_scratch(func: Any, args: tuple[Any, ...]) -> list[list[Scratch]]:
    """What a cuFFT-backed FFT op allocates after its output, as groups that live one after
    another (a held item lives into the next group)."""
    x = args[0]
    if not isinstance(x, torch.Tensor) or x.numel() == 0:
        return []
    dims = [int(d) % max(x.dim(), 1) for d in args[1]]
    if not dims:
        return []
    layout = _Layout(
        tuple(int(n) for n in x.shape),
        tuple(int(s) for s in x.stride()),
        x.element_size(),
        int(x.storage_offset()),
    )
    if func is aten._fft_r2c.default:
        return _r2c(layout, dims, bool(args[3]))
    if func is aten._fft_c2r.default:
        return _c2r(layout, dims, int(args[3]), x.element_size() // 2)
    buffer = (layout.nbytes, "FFT second working buffer", True)
    return _with_buffer(_c2c_steps(layout, dims)[0], 1, buffer)


def roll_temporaries(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[int, str]]:
    """``roll`` on CUDA (TensorTransformations.cu): over one dimension, a non-contiguous input
    is made contiguous first; over ``k`` dimensions, ``roll_common`` rolls the first into a new
    tensor and recurses, so ``k - 1`` tensors of the input's size live until the output is
    made; with no dimensions the input is flattened (``contiguous().view``)."""
    x = args[0]
    if not isinstance(x, torch.Tensor) or x.numel() == 0:
        return []
    dims = args[2] if len(args) > 2 else kwargs.get("dims", ())
    dims = list(dims) if isinstance(dims, (list, tuple)) else [dims]
    nbytes = x.numel() * x.element_size()
    out: list[tuple[int, str]] = []
    if not x.is_contiguous():
        out.append((nbytes, "roll contiguous input"))
    out += [(nbytes, "roll over one dimension of several")] * max(len(dims) - 1, 0)
    return out
