"""The cases of ``op_sweep.py``: which OpInfo samples are run, at what scale, and how one call
is made, forward or backward, the same way on the GPU and in memfit's trace.

A case is ``op|variant|dtype|direction|sample_index``. Its inputs are made on the CPU from a
seed derived from the case's op, variant and dtype (so the GPU host and this machine make the
same values), then moved: ``.to("cuda")`` for the GPU, an empty meta tensor with the CPU values
as its shadow for the trace (as memfit moves a user's batch).

Scaling: OpInfo samples are tiny (dimensions of ``S`` = 5, ``M`` = 10, ``L`` = 20 elements).
Their sample functions read these module constants when called, so the sweep multiplies them
by a factor ``k`` (1, 2, 4, ... 65536) while it generates samples: every dimension and size
argument written with them grows together, and the sample stays valid. For each (op, dtype) the
smallest ``k`` is used at which some samples' tensors total ``MIN_BYTES`` (1 MiB) to
``MAX_BYTES`` (64 MiB), with no sample before them over ``MAKE_BYTES`` (sizes found first on the
meta device, without data; a sample function that needs data is sized on the CPU); the largest
``per_op`` of those samples are the cases. Samples written with literal sizes do not grow
(convolutions, pools, attention, most of ``linalg``): an (op, dtype) with no sample of
``MIN_BYTES`` at any factor runs its largest samples found instead, its rows marked ``small``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
import types
import unittest
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

MIN_BYTES = 1 << 20
MAX_BYTES = 64 << 20
MAKE_BYTES = 512 << 20  # the largest sample made on the CPU, then dropped
FACTORS = tuple(2**i for i in range(17))  # 1 to 65536: a 1-d sample of S grows to 1.25 MiB
LADDER_SECONDS = 5.0  # a factor whose samples take longer to make ends the search
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
_CONSTANTS = ("S", "M", "L")
_BASE = {"S": 5, "M": 10, "L": 20}


def op_db() -> list[Any]:
    """PyTorch's OpInfo database."""
    testing_importable()
    from torch.testing._internal.common_methods_invocations import op_db as db

    return list(db)


def testing_importable() -> None:
    """PyTorch's test modules import ``expecttest`` (a test-only package the GPU host may
    lack); only its ``TestCase`` base class is needed to import them."""
    if "expecttest" not in sys.modules:
        try:
            import expecttest  # noqa: F401
        except ImportError:
            shim = types.ModuleType("expecttest")
            shim.TestCase = unittest.TestCase  # type: ignore[attr-defined]
            sys.modules["expecttest"] = shim


@contextlib.contextmanager
def scaled(k: int) -> Iterator[None]:
    """OpInfo's size constants multiplied by ``k`` while this lasts (see the module doc)."""
    mods = [
        m
        for name, m in list(sys.modules.items())
        if name.startswith("torch.testing._internal") and isinstance(m, types.ModuleType)
    ]
    saved = []
    for m in mods:
        for c in _CONSTANTS:
            if getattr(m, c, None) == _BASE[c]:
                saved.append((m, c))
                setattr(m, c, _BASE[c] * k)
    try:
        yield
    finally:
        for m, c in saved:
            setattr(m, c, _BASE[c])


def op_key(op: Any) -> str:
    return f"{op.name}|{op.variant_test_name}"


def seed_of(text: str) -> int:
    return zlib.crc32(text.encode())


def tensors(sample: Any) -> list[torch.Tensor]:
    leaves, _ = tree_flatten((sample.input, sample.args, sample.kwargs))
    return [t for t in leaves if isinstance(t, torch.Tensor)]


def input_bytes(sample: Any) -> int:
    """Bytes of the sample's tensors (distinct storages counted once each)."""
    seen: dict[int, int] = {}
    for t in tensors(sample):
        seen[id(t) if t.device.type == "meta" else t.untyped_storage().data_ptr()] = (
            t.numel() * t.element_size()
        )
    return sum(seen.values())


def cuda_reason(op: Any, dtype: torch.dtype, direction: str) -> str:
    """Why the GPU cannot run this case (empty if it can). OpInfo decides some CUDA dtypes by
    the GPU present (bf16 needs sm53 or later), so only the GPU side asks: the trace runs every
    dtype, and the comparison takes the GPU's word."""
    if dtype not in op.supported_dtypes("cuda"):
        return "dtype not supported on CUDA"
    if direction == "backward" and dtype not in op.supported_backward_dtypes("cuda"):
        return "no backward in this dtype on CUDA"
    return ""


def samples(op: Any, dtype: torch.dtype, k: int, device: str, grad: bool) -> Iterator[Any]:
    """The op's samples at factor ``k``, seeded by op, variant and dtype, one at a time (an op
    may have thousands at a large factor: none is kept here)."""
    torch.manual_seed(seed_of(f"{op_key(op)}|{dtype}"))
    with scaled(k):
        yield from op.sample_inputs(device, dtype, requires_grad=grad)


def sizes_of(op: Any, dtype: torch.dtype, k: int, device: str) -> list[int]:
    with contextlib.closing(samples(op, dtype, k, device, False)) as found:
        return [input_bytes(s) for s in found]


def chosen(op: Any, dtype: torch.dtype, k: int, grad: bool, indices: tuple[int, ...]) -> dict:
    """The samples at ``indices`` made on the CPU (those before them made and dropped), each
    as ``(sample, on_cpu)``: which of its tensors the op wants on the CPU (:func:`_on_cpu`)."""
    kept = {}
    with contextlib.closing(samples(op, dtype, k, "cpu", grad)) as found:
        for i, s in enumerate(found):
            if i in indices:
                kept[i] = s
            if i >= max(indices):
                break
    where = _on_cpu(op, dtype, k, grad, indices)
    return {i: (s, where.get(i, [])) for i, s in kept.items()}


def _on_cpu(
    op: Any, dtype: torch.dtype, k: int, grad: bool, indices: tuple[int, ...]
) -> dict[int, list[bool]]:
    """For each sample at ``indices``, whether each tensor (in ``moved``'s order) stays on the
    CPU: the samples made for the meta device show it (a ``tensor_split`` index tensor is made
    on the CPU whatever the device). Empty where samples cannot be made on meta."""
    where: dict[int, list[bool]] = {}
    try:
        with contextlib.closing(samples(op, dtype, k, "meta", grad)) as found:
            for i, s in enumerate(found):
                if i in indices:
                    where[i] = _cpu_flags(s)
                if i >= max(indices):
                    break
    except Exception:
        return {}
    return where


@dataclass(frozen=True)
class Choice:
    """The samples an (op, dtype) runs: factor ``k`` and sample indices, or why none."""

    k: int = 0
    indices: tuple[int, ...] = ()
    sizes: tuple[int, ...] = ()
    reason: str = ""
    small: bool = False  # no sample reached MIN_BYTES: the largest found


def choose(op: Any, dtype: torch.dtype, per_op: int) -> Choice:
    """The smallest factor with samples of ``MIN_BYTES`` to ``MAX_BYTES``, and the largest
    ``per_op`` of them (module doc); sizes found on the meta device, without data. With none
    at any factor, the largest samples found (:func:`_small`)."""
    best: tuple[int, list[int]] = (0, [])
    for k in FACTORS:
        start = time.perf_counter()
        try:
            sizes = sizes_of(op, dtype, k, "meta")
        except Exception:  # the sample function needs data: sizes from the CPU
            if k > 1:
                return _small(best, per_op, f"meta samples fail at k={k}")
            return _choose_on_cpu(op, dtype, per_op)
        if not sizes:
            return Choice(reason="no samples")
        if max(sizes) < MIN_BYTES and max(sizes) > max(best[1], default=0):
            best = (k, sizes)
        picked = _pick(k, sizes, per_op)
        if picked is not None:
            return picked
        if time.perf_counter() - start > LADDER_SECONDS:
            return _small(best, per_op, f"slow at k={k}")
    return _small(best, per_op, "every factor")


def _small(best: tuple[int, list[int]], per_op: int, why: str) -> Choice:
    """No sample reaches ``MIN_BYTES``: the largest ones found (at the factor ``best`` gives)
    are still cases, marked ``small`` (convolutions, pools and attention write their sample
    sizes as literals, which no factor grows)."""
    k, sizes = best
    picked = _pick(k, sizes, per_op, floor=1) if sizes else None
    if picked is None:
        return Choice(reason=f"no sample with a tensor ({why})")
    return dataclasses.replace(picked, small=True)


def _choose_on_cpu(op: Any, dtype: torch.dtype, per_op: int) -> Choice:
    """:func:`choose` for samples made only with data: each factor is tried on the CPU while
    the bound ``bytes(k=1) * k ** ndim`` (each dimension grown by ``k``) stays in
    ``MAKE_BYTES``, so that no sample of the next factor can be too large to make."""
    try:
        first = list(samples(op, dtype, 1, "cpu", False))
    except Exception as exc:
        return Choice(reason=f"samples fail: {type(exc).__name__}: {exc}"[:200])
    if not first:
        return Choice(reason="no samples")
    sizes = [input_bytes(s) for s in first]
    best = (1, sizes)
    ndim = max((t.dim() for s in first for t in tensors(s)), default=0)
    for k in FACTORS:
        if k > 1:
            if max(sizes) * k**ndim > MAKE_BYTES:
                break
            try:
                sizes = sizes_of(op, dtype, k, "cpu")
            except Exception:
                break
            if sizes and max(sizes) < MIN_BYTES and max(sizes) > max(best[1], default=0):
                best = (k, sizes)
        picked = _pick(k, sizes, per_op)
        if picked is not None:
            return picked
    return _small(best, per_op, "every factor, cpu")


def _pick(k: int, sizes: list[int], per_op: int, floor: int = MIN_BYTES) -> Choice | None:
    """Samples of ``floor`` to ``MAX_BYTES`` with none before them over ``MAKE_BYTES``
    (all samples up to the last chosen are made on the CPU), largest first."""
    fits, made = [], 0
    for i, n in enumerate(sizes):
        made = max(made, n)
        if made > MAKE_BYTES:
            break
        if floor <= n <= MAX_BYTES:
            fits.append(i)
    if not fits:
        return None
    chosen = tuple(sorted(sorted(fits, key=lambda i: -sizes[i])[:per_op]))
    return Choice(k, chosen, tuple(sizes[i] for i in chosen))


def _cpu_flags(sample: Any) -> list[bool]:
    """Whether each tensor of ``sample``, in ``transform``'s order, is on the CPU."""
    flags: list[bool] = []

    def note(t: Any) -> Any:
        if isinstance(t, torch.Tensor):
            flags.append(t.device.type == "cpu")
        return t

    sample.transform(note)
    return flags


def moved(
    sample: Any, move: Callable[[torch.Tensor], torch.Tensor], on_cpu: list[bool] | None = None
) -> Any:
    """The sample with each tensor moved by ``move`` but those ``on_cpu`` flags (in
    ``transform``'s order) keep on the CPU; leaves keep ``requires_grad``."""
    done: dict[int, torch.Tensor] = {}
    on_cpu = on_cpu or []
    count = [0]

    def one(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        n, count[0] = count[0], count[0] + 1
        if id(x) not in done:
            stays = n < len(on_cpu) and on_cpu[n]
            t = x.detach() if stays else move(x.detach())
            done[id(x)] = t.requires_grad_(True) if x.requires_grad else t
        return done[id(x)]

    return sample.transform(one) if hasattr(sample, "transform") else tree_map(one, sample)


def call_op(op: Any, sample: Any) -> Any:
    return op(sample.input, *sample.args, **sample.kwargs)


def run_call(
    op: Any, sample: Any, direction: str, on_backward: Callable[[], None] = lambda: None
) -> None:
    """The recorded call: forward under ``no_grad`` with its outputs freed; backward: the
    forward with grad, ``ones_like`` of each differentiable output as its gradient (made after
    the forward, so both sides record it), ``autograd.grad`` for the inputs, all freed."""
    if direction == "forward":
        with torch.no_grad():
            out = call_op(op, sample)
        del out
        return
    inputs = [t for t in tensors(sample) if t.requires_grad]
    out = call_op(op, sample)
    outs = [
        t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.grad_fn is not None
    ]
    if not inputs or not outs:
        raise NotSampled("no differentiable output")
    grads_out = [torch.ones_like(t) for t in outs]
    on_backward()
    grads = torch.autograd.grad(outs, inputs, grads_out, allow_unused=True)
    del out, outs, grads_out, grads


class NotSampled(Exception):
    """The case cannot run as asked (no differentiable output); not an error of either side."""
