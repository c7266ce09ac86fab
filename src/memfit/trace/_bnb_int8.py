"""bitsandbytes' LLM.int8 ops as its CUDA backend runs them (bitsandbytes 0.50): their outputs
and what they allocate beside them, for memfit's own kernels (``_fake_kernels``).

``Linear8bitLt`` multiplies by ``MatMul8bitLt``: it quantizes the input row by row to int8
(``int8_vectorwise_quant``), multiplies the int8 matrices into int32 and scales the product
back to half precision (``int8_scaled_mm``). With a threshold (LLM.int8's outlier split,
transformers' default 6.0), the input's columns that hold a value at or above it are taken out
before quantizing and multiplied in the input's precision against their dequantized weight
columns (``int8_mixed_scaled_mm``), and autograd keeps those columns for the backward.

Which columns those are depends on the activations' values, which a trace does not have, and
bitsandbytes' fake kernels ask for a data-dependent size there, which meta tensors cannot give.
Here every column is taken as an outlier: the most the split can take (an upper bound on the
columns kept for the backward and on the dequantized weight), and the estimate says so.

What each CUDA kernel allocates, read from bitsandbytes 0.50.2's ``backends/cuda/ops.py`` and
``backends/default/ops.py`` (not yet measured on a GPU):

``int8_vectorwise_quant(A, threshold)``
    the row scales (float32, one a row) and the int8 rows; with a threshold, ``|A|`` (A's
    dtype) and the mask of values at or above it (bool), then per column whether any is
    (bool), and the outlier columns' indices (int64).
``int8_scaled_mm(A, B, ...)``
    the int32 product, then its fp16 dequantization, and a copy in the requested dtype where
    that is not fp16; the int32 and fp16 ones go when it returns. An inner size not divisible by
    4 multiplies in float32 instead (both operands as float32 first).
``int8_mixed_scaled_mm``
    the outlier columns of A (A's dtype; an output, kept by autograd), their weight columns
    (int8) dequantized to float32 (a product and its scaled copy) and cast to A's dtype, then
    ``int8_scaled_mm`` (its product a temporary here), then the outliers' product added into a
    new output.
``int8_vectorwise_dequant(A, stats)``
    ``A * stats * (1/127)``: a float32 product and the float32 result.
"""

from __future__ import annotations

from typing import Any

import torch

from memfit.trace._fake_args import arg, meta
from memfit.trace._scratch import Scratch

__all__ = ["INT8_FAKES", "int8_scratch", "int8_temporaries"]

_QUANT = "bitsandbytes::int8_vectorwise_quant.default"
_SCALED = "bitsandbytes::int8_scaled_mm.default"
_MIXED = "bitsandbytes::int8_mixed_scaled_mm.default"
_DEQUANT = "bitsandbytes::int8_vectorwise_dequant.default"


def _rows_cols(a: torch.Tensor) -> tuple[int, int]:
    cols = int(a.shape[-1])
    return (a.numel() // cols if cols else 0), cols


def _quant(args: tuple[Any, ...], kwargs: dict[str, Any], ctx: Any) -> Any:
    """``int8_vectorwise_quant``: (int8 rows, row scales, outlier columns or None); every
    column an outlier where there is a threshold (see the module doc)."""
    a = args[0]
    threshold = float(arg(args, kwargs, 1, "threshold", 0.0))
    rows, cols = _rows_cols(a)
    outliers = None
    if threshold > 0.0:
        ctx.note(
            "LLM.int8's outlier columns depend on the activations' values; every column taken "
            f"as an outlier (threshold {threshold:g}), an upper bound on the columns kept for "
            "the backward and on the dequantized weights"
        )
        outliers = meta((cols,), torch.int64)
    return meta(tuple(a.shape), torch.int8), meta((rows,), torch.float32), outliers


def _scaled_dtype(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.dtype:
    dtype = arg(args, kwargs, 5, "dtype", None)
    return dtype if isinstance(dtype, torch.dtype) else torch.float16


def _scaled(args: tuple[Any, ...], kwargs: dict[str, Any], ctx: Any) -> Any:
    """``int8_scaled_mm``: the product in the requested dtype (fp16 by default)."""
    a, b = args[0], args[1]
    return meta((*a.shape[:-1], int(b.shape[0])), _scaled_dtype(args, kwargs))


def _mixed(args: tuple[Any, ...], kwargs: dict[str, Any], ctx: Any) -> Any:
    """``int8_mixed_scaled_mm``: (the product in A's dtype, A's outlier columns)."""
    a, cb = args[0], args[2]
    outliers = arg(args, kwargs, 5, "outlier_cols", None)
    rows, _ = _rows_cols(a)
    n = int(outliers.numel()) if isinstance(outliers, torch.Tensor) else 0
    sub = meta((rows, n), a.dtype) if n else meta((0,), a.dtype)
    return meta((*a.shape[:-1], int(cb.shape[0])), a.dtype), sub


def _dequant(args: tuple[Any, ...], kwargs: dict[str, Any], ctx: Any) -> Any:
    return meta(tuple(args[0].shape), torch.float32)


INT8_FAKES = {_QUANT: _quant, _SCALED: _scaled, _MIXED: _mixed, _DEQUANT: _dequant}


def _product_temporaries(
    a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype
) -> list[tuple[int, str]]:
    """What ``int8_scaled_mm`` holds before its output: the int32 product (float32 operands
    first where the inner size is not a multiple of 4), and the fp16 one where another dtype
    is asked for."""
    rows, inner = _rows_cols(a)
    n = int(b.shape[0])
    out: list[tuple[int, str]] = []
    if inner % 4:
        out += [
            (rows * inner * 4, "int8 input as float32"),
            (n * inner * 4, "int8 weight as float32"),
        ]
        out += [(rows * n * 4, "int8 product in float32")]
    out.append((rows * n * 4, "int8 product (int32)"))
    if dtype != torch.float16:
        out.append((rows * n * 2, "int8 product dequantized (fp16)"))
    return out


def int8_temporaries(
    name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> list[tuple[int, str]]:
    """What an LLM.int8 op's CUDA kernel allocates before its outputs and frees when it
    returns, as ``(bytes, label)``."""
    if name == _SCALED:
        return _product_temporaries(args[0], args[1], _scaled_dtype(args, kwargs))
    if name == _DEQUANT:
        return [(args[0].numel() * 4, "int8 dequantization product (float32)")]
    if name == _MIXED:
        a, cb = args[0], args[2]
        outliers = arg(args, kwargs, 5, "outlier_cols", None)
        n = int(outliers.numel()) if isinstance(outliers, torch.Tensor) else 0
        weight = int(cb.shape[0]) * n
        made = [
            (weight, "outlier weight columns (int8)"),
            (weight * 4, "outlier weight columns dequantized (float32)"),
            (weight * 4, "outlier weight columns scaled (float32)"),
            (weight * a.element_size(), "outlier weight columns in the input's dtype"),
        ]
        if not n:
            return _product_temporaries(a, cb, a.dtype)
        rows, _ = _rows_cols(a)
        # the outliers' product is added into a new output: the int8 one is a temporary
        before = (rows * int(cb.shape[0]) * a.element_size(), "int8 product before the outliers'")
        return [*made, *_product_temporaries(a, cb, a.dtype), before]
    return []


def int8_scratch(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[list[Scratch]]:
    """What ``int8_vectorwise_quant`` allocates after its outputs with a threshold: ``|A|`` and
    the mask at or above it, then the columns that hold one."""
    if name != _QUANT or float(arg(args, kwargs, 1, "threshold", 0.0)) <= 0.0:
        return []
    a = args[0]
    _, cols = _rows_cols(a)
    magnitude: Scratch = (a.numel() * a.element_size(), "int8 outlier search |A|")
    mask: Scratch = (a.numel(), "int8 outlier mask")
    return [[magnitude, mask], [(cols, "int8 outlier columns")]]
