"""What the fused attention kernels allocate beyond their outputs and gradients.

The memory-efficient kernel's forward (``efficient_forward_scratch``): in half precision, a
head dim beyond 128 runs the kernel that iterates over the value's columns
(``dispatch_cutlassF``'s last, a head dim up to 65,536), which accumulates the output in a
float32 buffer of the output's shape, taken after the outputs and freed when the kernel ends
(H100, torch 2.11: 390,070,272 bytes at Gemma-4's 512-wide heads, 93 x 512 queries x 4 heads,
bfloat16; head dims up to 128 iterate once and take none).

Flash attention's (``flash_backward_copies``, ``flash_backward_scratch``): see those.

The memory-efficient kernel's:

``_efficient_attention_backward`` (ATen's attention_backward.cu, torch 2.11), which SDPA's
``_scaled_dot_product_efficient_attention_backward`` calls on transposed views:

* ``grad_out.contiguous()`` in (batch, queries, heads, dim) order, before the gradients: a copy
  where the gradient arrives in another layout;
* after the gradients, ``delta``, one float32 per query and head: made empty where the kernel
  computes it (half precision on sm80 and later), else ``(grad_out.float() * out.float())
  .sum(-1).transpose(-2, -1).contiguous()``, whose temporaries go at once;
* the kernel's workspace, ``num_batches * heads * strideBH`` floats: per (batch, head) a float32
  accumulator tile and 16 bytes of lock and counter for each (query block, head-dim block) of
  dQ, and in half precision, where dK and dV do not fit the registers (head dims beyond the
  query block), a float32 staging area for them per key split.

Which CUTLASS kernel runs (its query and key block sizes) is the first of
``dispatch_cutlassB``'s list for sm80 that takes the head dim and the dropout; the sizes were
checked against the H100 op sweep (torch 2.11: 262,400 bytes for 4 x 4 heads of head dim 8,
fp32 and half; 4,198,400 for 32 packed sequences of 8 heads) and H200 traces of BERT-base fp32
(50,380,800 at b32 s512).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from memfit.trace._scratch import Scratch

__all__ = [
    "FLASH_BACKWARD",
    "efficient_backward_copies",
    "efficient_backward_scratch",
    "efficient_forward_scratch",
    "flash_backward_copies",
    "flash_backward_scratch",
]

aten = torch.ops.aten

_HALF = (torch.float16, torch.bfloat16)

# (query block, key block, largest head dim) of the kernels dispatch_cutlassB tries, in order
# (kernels/cutlassB.h, sm80 to sm90, torch 2.11): half without and with dropout, and float32
_HALF_KERNELS = ((64, 64, 32), (64, 64, 64), (128, 128, 128), (64, 64, 128), (128, 64, 65536))
_FLOAT_KERNELS = ((64, 64, 32), (64, 64, 64), (128, 64, 128), (64, 64, 128), (128, 64, 65536))


@dataclass(frozen=True)
class _Call:
    """One backward call's dimensions as the CUDA kernel sees them."""

    batch: int  # query.size(0): delta's batch
    queries: int  # query.size(1): delta's rows
    heads: int
    head_dim: int
    value_dim: int
    sequences: int  # num_batches: packed sequences with cu_seqlens, else the batch
    max_queries: int
    max_keys: int
    dtype: torch.dtype
    dropout: bool
    splits: int | None  # num_splits_key asked for


def _call(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Call | None:
    """The call's dimensions; SDPA's op takes (batch, heads, seq, dim) tensors, the raw op
    (batch, seq, heads, dim) ones and optional packed sequences."""
    if func is aten._scaled_dot_product_efficient_attention_backward.default:
        q, k, v = args[1], args[2], args[3]
        b, h, m, d = (int(x) for x in q.shape)
        n = int(k.shape[2])
        dropout = float(args[9]) != 0.0 if len(args) > 9 else False
        return _Call(b, m, h, d, int(v.shape[3]), b, m, n, q.dtype, dropout, None)
    q, k, v = args[1], args[2], args[3]
    b, m, h, d = (int(x) for x in q.shape)
    n = int(k.shape[1])
    cu_q = args[6] if len(args) > 6 else kwargs.get("cu_seqlens_q")
    sequences, max_q, max_k = b, m, n
    if isinstance(cu_q, torch.Tensor):
        sequences = int(cu_q.shape[0]) - 1
        max_q, max_k = int(args[8]), int(args[9])
    dropout = float(args[11]) != 0.0 if len(args) > 11 else False
    splits = args[17] if len(args) > 17 else kwargs.get("num_splits_key")
    split = int(splits) if splits is not None else None
    return _Call(b, m, h, d, int(v.shape[3]), sequences, max_q, max_k, q.dtype, dropout, split)


def efficient_backward_copies(func: Any, args: tuple[Any, ...]) -> list[tuple[int, str]]:
    """``grad_out.contiguous()`` in (batch, queries, heads, dim) order: a copy where the
    gradient arrives laid out otherwise (freed when the kernel returns)."""
    grad = args[0]
    if not isinstance(grad, torch.Tensor):
        return []
    if func is aten._scaled_dot_product_efficient_attention_backward.default:
        grad = grad.transpose(1, 2)
    if grad.is_contiguous():
        return []
    return [(grad.numel() * grad.element_size(), "attention backward contiguous grad_out")]


def _kernel(c: _Call) -> tuple[int, int, int]:
    """The (query block, key block, largest head dim) of the kernel that runs."""
    kernels = _HALF_KERNELS if c.dtype in _HALF else _FLOAT_KERNELS
    widest = max(c.head_dim, c.value_dim)
    return next(k for k in kernels if k[2] >= widest)


def _workspace(c: _Call) -> int:
    """``p.workspace_size()`` of the kernel that runs (kernel_backward.h)."""
    block_i, block_j, max_k = _kernel(c)
    half = c.dtype in _HALF
    tiles = -(-c.max_queries // block_i) * -(-c.head_dim // block_j)
    floats = tiles * (4 + block_i * block_j)  # dQ: lock, counter, padding and the tile
    if half and max_k > block_i:  # dK and dV accumulate in global memory
        splits = -(-c.max_keys // block_j)
        if c.splits is not None:
            splits = min(splits, c.splits)
        else:
            if c.sequences * c.heads >= 256 and c.max_keys <= 2 * block_j:
                splits = 1
            splits = min(splits, 200 // (c.sequences * c.heads))
        splits = max(splits, 1)
        align = -(-c.head_dim // block_i) * block_i
        align_v = -(-c.value_dim // block_i) * block_i
        floats += splits * block_j * (align + align_v)
    stride = -(-floats // 4) * 4
    return c.sequences * c.heads * stride * 4


def efficient_backward_scratch(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> list[list[Scratch]]:
    """Delta (with the temporaries that make it in float32), then the workspace, which
    lives while delta does (module doc)."""
    c = _call(func, args, kwargs)
    if c is None:
        return []
    rows = c.batch * c.heads * c.queries * 4
    delta: list[Scratch] = []
    if c.dtype not in _HALF:
        wide = c.batch * c.heads * c.queries * c.value_dim * 4
        delta += [
            (wide, "attention backward grad_out x output"),
            (rows, "attention backward row sums"),
        ]
    delta.append((rows, "attention backward delta", True))
    workspace = _workspace(c)
    if not workspace:
        return [delta]
    return [delta, [(workspace, "memory-efficient attention backward workspace")]]


def efficient_forward_scratch(args: tuple[Any, ...]) -> list[tuple[int, str]]:
    """The memory-efficient forward's float32 output accumulator, where it takes one (module
    doc). Its query and value are (batch, heads, seq, dim) for SDPA's op and (batch, seq, heads,
    dim) for ``_efficient_attention_forward``: the output's elements are the query's over its
    head dim times the value's either way."""
    q, v = args[0], args[2]
    if not isinstance(q, torch.Tensor) or not isinstance(v, torch.Tensor) or q.dtype not in _HALF:
        return []
    head_dim, value_dim = int(q.shape[-1]), int(v.shape[-1])
    if max(head_dim, value_dim) <= 128:
        return []
    outputs = q.numel() // max(head_dim, 1) * value_dim
    return [(outputs * 4, "memory-efficient attention output accumulator")]


FLASH_BACKWARD = frozenset(
    {
        aten._flash_attention_backward.default,
        aten._scaled_dot_product_flash_attention_backward.default,
    }
)


def _bmhk(func: Any, t: torch.Tensor) -> torch.Tensor:
    """``t`` in (batch, seq, heads, dim) order, as the flash kernel takes it: SDPA's op
    transposes its (batch, heads, seq, dim) tensors first."""
    if func is aten._scaled_dot_product_flash_attention_backward.default:
        return t.transpose(1, 2)
    return t


def flash_backward_copies(func: Any, args: tuple[Any, ...]) -> list[tuple[int, str]]:
    """``_flash_attention_backward``'s ``grad_out.contiguous()`` and ``out.contiguous()`` (the
    kernel wants both dense), made before the gradients and freed when it returns."""
    copies = []
    for t, what in ((args[0], "grad_out"), (args[4], "output")):
        if isinstance(t, torch.Tensor) and not _bmhk(func, t).is_contiguous():
            copies.append((t.numel() * t.element_size(), f"flash attention backward {what} copy"))
    return copies


def flash_backward_scratch(func: Any, args: tuple[Any, ...]) -> list[tuple[int, str]]:
    """``mha_bwd`` (flash_api.cpp) after the gradients: the softmax row sums (float32, the
    queries rounded up to 128), a float32 dQ accumulator (head dim rounded up to 32, or to 64
    beyond 128), and with fewer key/value heads than query heads dK and dV at every query head,
    summed into the gradients after. H100 op sweep, torch 2.11: 8,192 and 262,144 bytes for 4
    sequences of 11 queries, 4 heads of dim 8."""
    q, k = _bmhk(func, args[1]), _bmhk(func, args[2])
    b, s, h, d = (int(x) for x in q.shape)
    s_round = -(-s // 128) * 128
    d_round = -(-d // 32) * 32 if d <= 128 else -(-d // 64) * 64
    group = [
        (b * h * s_round * 4, "flash attention backward softmax sums"),
        (b * s_round * h * d_round * 4, "flash attention backward dQ accumulator"),
    ]
    if int(k.shape[2]) != h:
        expanded = b * int(k.shape[1]) * h * d * k.element_size()
        group += [(expanded, "flash attention backward expanded dK")]
        group += [(expanded, "flash attention backward expanded dV")]
    return group
