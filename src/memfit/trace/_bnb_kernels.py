"""What bitsandbytes' 4-bit matrix product allocates beyond its output on a GPU.

``bitsandbytes::gemm_4bit`` (QLoRA's base layers, forward) runs on the GPU either its own fused
kernel, which takes nothing but its output, or, where bitsandbytes' heuristic says plain
dequantization is faster, ``_dequant_linear_fallback``. The fallback first makes the 4-bit
weight's scales float32 (the nested ones of double quantization: two float32 copies, the
dequantized and with its offset added). Then it dequantizes the whole weight to the input's
dtype (``N x K`` elements) and multiplies. Those temporaries come before the output, and they
go when the call returns. The fake kernel the trace runs makes the output alone. So the choice
is asked of the installed bitsandbytes' own heuristic (``_gemm_4bit_use_custom_fn``, past its
``_gemm_4bit_custom_max_m`` rows always the fallback), with the target GPU's multiprocessors
and compute capability. A bitsandbytes without that heuristic is taken to dequantize: it costs
more memory, never less.

H100, torch 2.11, bitsandbytes 0.50.2: a Llama-style QLoRA step at 4 x 512 tokens dequantized
each base weight (524,288 bytes for a 256 x 1024 key projection in bf16), which the trace
missed, at -0.7% to -1.2% reserved.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Any

import torch

from memfit._patching import patched

__all__ = ["GEMM_4BIT", "gemm_4bit_temporaries"]

GEMM_4BIT = "bitsandbytes::gemm_4bit"


def _cuda_ops() -> Any:
    """bitsandbytes' CUDA backend module, imported on a CPU-only build of torch too: it reads
    one CUDA stream function at import, stood in for while it imports (the heuristic itself
    reads none of torch's CUDA), so that the estimate is the same on either build."""
    stand_in = not hasattr(torch._C, "_cuda_getCurrentRawStream")
    if stand_in:
        torch._C._cuda_getCurrentRawStream = lambda *a: 0  # type: ignore[attr-defined]
    try:
        return importlib.import_module("bitsandbytes.backends.cuda.ops")
    finally:
        if stand_in:
            del torch._C._cuda_getCurrentRawStream  # type: ignore[attr-defined]


def _custom_kernel(
    a: torch.Tensor, rows: int, n: int, k: int, blocksize: int, gpu: tuple[int, int, int]
) -> bool:
    """Whether bitsandbytes runs its fused kernel here (``gpu``: multiprocessors, major and
    minor compute capability); False where its heuristic cannot be asked."""
    try:
        ops = _cuda_ops()
    except Exception:
        return False
    max_rows = getattr(ops, "_gemm_4bit_custom_max_m", None)
    choose = getattr(getattr(ops, "_gemm_4bit_use_custom_fn", None), "__wrapped__", None)
    if not isinstance(max_rows, int) or choose is None or not hasattr(ops, "_gpu_dispatch_props"):
        return False
    if rows > max_rows or k % blocksize:
        return False
    with contextlib.suppress(Exception), patched([(ops, "_gpu_dispatch_props", lambda i: gpu)]):
        return bool(choose(0, a.dtype, rows, n, k))
    return False


def gemm_4bit_temporaries(
    args: tuple[Any, ...], kwargs: dict[str, Any], gpu: tuple[int, int, int]
) -> list[tuple[int, str]]:
    """The fallback's temporaries, made before the output, or none where the fused kernel
    runs (see the module doc)."""
    a, shape, blocksize = args[0], args[2], args[4]
    if not isinstance(a, torch.Tensor) or a.numel() == 0:
        return []
    k = int(a.shape[-1])
    rows, n = a.numel() // k, int(shape[0])
    if _custom_kernel(a, rows, n, k, int(blocksize), gpu):
        return []
    nested = kwargs.get("absmax_8bit", args[7] if len(args) > 7 else None)
    out: list[tuple[int, str]] = []
    if isinstance(nested, torch.Tensor):
        scales = nested.numel() * 4
        out += [(scales, "4-bit scales dequantized"), (scales, "4-bit scales with their offset")]
    out.append((n * k * a.element_size(), "4-bit weight dequantized"))
    return out
