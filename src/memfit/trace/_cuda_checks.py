"""What CUDA kernels refuse that meta kernels let through, refused in the trace as the GPU does.

A meta kernel computes shapes and dtypes; it does not check everything its CUDA kernel does. A
matrix product of a float32 and a bfloat16 operand outside autocast runs on meta tensors (its
output float32) and raises on the GPU (H100, torch 2.11: TIPSv2's and MRA's bf16 inference,
YOSO's training backward, each of which memfit had estimated). An
estimate of a step that cannot run would be a number for nothing: the trace raises the GPU's
error instead, which names the op, the module and the phase.

``index_put`` is refused too where its values' dtype is not the destination's: the CUDA (and
CPU) kernel raises, the meta kernel writes them (H200, torch 2.11: SmolVLM's training under
bf16 autocast puts bf16 image features into float32 text embeddings, and fails on the GPU).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["refuse_as_cuda"]

aten = torch.ops.aten

# the matrix products and the positions of their two matrices, which CUDA's kernels require of
# one dtype (the added ``self`` of addmm and baddbmm may differ in a few cases: not checked)
_PRODUCTS = {
    aten.mm.default: (0, 1),
    aten.bmm.default: (0, 1),
    aten.addmm.default: (1, 2),
    aten.baddbmm.default: (1, 2),
}

_C10 = {
    torch.float32: "float",
    torch.float64: "double",
    torch.float16: "c10::Half",
    torch.bfloat16: "c10::BFloat16",
}
_SCALAR = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half"}
_SCALAR[torch.bfloat16] = "BFloat16"


def _message(func: Any, a: torch.dtype, b: torch.dtype) -> str:
    """The CUDA kernel's own words (H100, torch 2.11: the zoo's MRA and YOSO models)."""
    if func is aten.mm.default:
        got = f"{_C10.get(a, a)} != {_C10.get(b, b)}"
        return f"expected mat1 and mat2 to have the same dtype, but got: {got}"
    first, second = _SCALAR.get(a, str(a)), _SCALAR.get(b, str(b))
    if func is aten.addmm.default:
        return f"mat1 and mat2 must have the same dtype, but got {first} and {second}"
    return f"expected scalar type {first} but found {second}"


# the index puts and the positions of the destination and of the values
_PUTS = {
    aten.index_put.default: (0, 2),
    aten.index_put_.default: (0, 2),
    aten._index_put_impl_.default: (0, 2),
}


def refuse_as_cuda(func: Any, args: tuple[Any, ...]) -> None:
    """Raise what the CUDA kernel of ``func`` raises for ``args``, where it would."""
    put = _PUTS.get(func)
    if put is not None and len(args) > put[1]:
        dest, values = args[put[0]], args[put[1]]
        tensors = isinstance(dest, torch.Tensor) and isinstance(values, torch.Tensor)
        if tensors and dest.dtype != values.dtype:
            first, second = _SCALAR.get(dest.dtype, dest.dtype), _SCALAR.get(values.dtype)
            raise RuntimeError(
                "Index put requires the source and destination dtypes match, got "
                f"{first} for the destination and {second or values.dtype} for the source."
            )
        return
    at = _PRODUCTS.get(func)
    if at is None or len(args) <= at[1]:
        return
    a, b = args[at[0]], args[at[1]]
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return
    if a.dtype != b.dtype:
        raise RuntimeError(_message(func, a.dtype, b.dtype))
