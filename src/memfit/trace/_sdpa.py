"""Which attention kernel ``scaled_dot_product_attention`` runs on a real GPU, and running it.

On meta tensors PyTorch always picks the math backend, which saves the full attention matrix;
on a GPU the same call runs a fused kernel that saves only the output and a log-sum-exp. The
rules below follow ``sdp_utils.cpp`` and what torch picks on an H200 (torch 2.11, cuDNN 9.19;
``benchmarks/sdpa_probe.py`` and ``sdpa_calls.py``, 2,232 synthetic calls and every call of
the validation set's models): on Hopper cuDNN's fused attention comes first for half
precision, masks and dropout included; then flash, memory-efficient, math.

cuDNN's kernel, traced through its own op when training, allocates a CUDA seed and offset, the
output and a float32 log-sum-exp per query, and in backward dQ, dK, dV and one workspace for a
float32 dQ accumulator and the softmax sums; without gradients it makes no log-sum-exp (flash
attention always does). The memory-efficient kernel takes a mask whose rows are aligned to 8
elements, padding a copy otherwise.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from memfit._gpus import Architecture

__all__ = ["GROUPED_MATH", "choose_backend", "run_sdpa"]

_HALF = (torch.float16, torch.bfloat16)


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], i: int, name: str, default: Any) -> Any:
    if len(args) > i:
        return args[i]
    return kwargs.get(name, default)


def choose_backend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None,
    sm: int,
    enable_gqa: bool = False,
    dropout_p: float = 0.0,
) -> str:
    """``cudnn``, ``flash``, ``efficient`` or ``math``: what SDPA picks on a GPU of compute
    ``sm`` (what each architecture may run: :class:`memfit._gpus.Architecture`)."""
    arch = Architecture(sm)
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return "math"
    if any(t.shape[-1] > 1 and t.stride(-1) != 1 for t in (q, k, v)):
        # every fused kernel wants the head dim's stride 1 (H100, torch 2.11: timm's
        # LowFormer chunks q, k and v off a (batch, heads, tokens, dims) permute, dims last
        # but strided: the math kernel ran)
        return "math"
    grad = bool(q.requires_grad or k.requires_grad or v.requires_grad)
    same_heads = q.shape[1] == k.shape[1] == v.shape[1]
    head_dim = q.shape[-1]
    half = q.dtype in _HALF and q.dtype == k.dtype == v.dtype
    dims_ok = head_dim <= 256 and head_dim % 8 == 0 and k.shape[-1] == v.shape[-1] == head_dim
    fused = half and dims_ok and (same_heads or enable_gqa)
    if arch.runs_cudnn_attention and fused and _cudnn_takes(q, k, attn_mask, dropout_p):
        return "cudnn"
    if arch.runs_flash_attention and attn_mask is None and fused:
        return "flash"
    if _strided_rows(attn_mask):
        # neither fused kernel takes it (H200, torch 2.11)
        return "math"
    if same_heads and _efficient_takes(q, k, v, arch, grad):
        return "efficient"
    return "math"


def _efficient_takes(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, arch: Architecture, grad: bool
) -> bool:
    """Whether the memory-efficient kernel takes these dtypes and head dims (it takes no
    grouped heads: the caller checks those)."""
    head_dim = q.shape[-1]
    align = 8 if q.dtype in _HALF else 4
    max_backward_dim = arch.efficient_backward_max_head_dim
    return (
        arch.runs_efficient_attention
        and q.dtype in (*_HALF, torch.float32)
        and q.dtype == k.dtype == v.dtype
        and head_dim % align == 0
        and v.shape[-1] % align == 0
        and not (grad and max_backward_dim is not None and head_dim > max_backward_dim)
    )


GROUPED_MATH = (
    "math: grouped-query attention in float32, which the memory-efficient kernel does not take, "
    "so each call keeps its (batch, heads, queries, keys) scores; bf16 or fp16 runs a fused "
    "kernel"
)


def _label(
    backend: str,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None,
    sm: int,
) -> str:
    """The backend as the estimate's note names it: the math kernel with why it ran where
    grouped heads alone kept the memory-efficient kernel out (Qwen2.5-0.5B and TinyLlama in
    float32 on an H200: the scores of every layer, 29-268 MB each)."""
    if backend != "math" or q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return backend
    if q.dtype != torch.float32 or q.shape[1] == k.shape[1] or _strided_rows(attn_mask):
        return backend
    grad = bool(q.requires_grad or k.requires_grad or v.requires_grad)
    return GROUPED_MATH if _efficient_takes(q, k, v, Architecture(sm), grad) else backend


def _cudnn_takes(
    q: torch.Tensor, k: torch.Tensor, attn_mask: torch.Tensor | None, dropout_p: float
) -> bool:
    """Whether cuDNN's fused attention takes the call (H200, torch 2.11): not a learned or
    non-contiguous mask, not a single key, not a single query with dropout."""
    if attn_mask is not None and (attn_mask.requires_grad or _strided_rows(attn_mask)):
        return False
    return k.shape[-2] > 1 and not (q.shape[-2] == 1 and dropout_p > 0)


def _strided_rows(attn_mask: torch.Tensor | None) -> bool:
    """A mask whose rows are not contiguous (transformers 5.17's T5 position bias, which is
    transposed)."""
    return attn_mask is not None and attn_mask.shape[-1] > 1 and attn_mask.stride(-1) != 1


def run_sdpa(args: tuple[Any, ...], kwargs: dict[str, Any], sm: int) -> tuple[torch.Tensor, str]:
    """Run SDPA with the backend the target GPU would choose; returns (output, the backend as
    the estimate's note names it)."""
    q, k, v = args[0], args[1], args[2]
    attn_mask = _arg(args, kwargs, 3, "attn_mask", None)
    dropout_p = float(_arg(args, kwargs, 4, "dropout_p", 0.0))
    is_causal = bool(_arg(args, kwargs, 5, "is_causal", False))
    scale = _arg(args, kwargs, 6, "scale", None)
    enable_gqa = bool(kwargs.get("enable_gqa", False))
    backend = choose_backend(q, k, v, attn_mask, sm, enable_gqa, dropout_p)
    label = _label(backend, q, k, v, attn_mask, sm)
    # should_compute_logsumexp: an input that wants a gradient, with grad mode on
    need_lse = (q.requires_grad or k.requires_grad or v.requires_grad) and torch.is_grad_enabled()
    bool_mask = attn_mask is not None and attn_mask.dtype == torch.bool
    if backend in ("cudnn", "efficient", "math") and bool_mask:
        # the kernels but flash take an additive mask: SDPA makes one of the query's dtype
        # before it calls them, held until the call returns (H200 traces, torch 2.11:
        # Mistral-7B's sliding-window mask, 64 MiB per layer at s4096)
        attn_mask = _additive(attn_mask, q.dtype)
    if backend == "cudnn" and not need_lse:
        # the philox seed and offset, the output, and no log-sum-exp without gradients; the
        # seed and offset go when the call returns
        seeds = [torch.empty((), dtype=torch.int64, device=q.device) for _ in range(2)]
        out_only = _like_query(q, v.shape[-1])
        _cudnn_workspace(q.device)
        del seeds
        return out_only, label
    if backend == "cudnn":
        # cuDNN's own op, as SDPA calls it: the seed and offset first, then the output and the
        # log-sum-exp (its meta kernel makes them the other way round: ``cuda_order``), its
        # 256-byte workspace; autograd keeps the mask (the additive copy of a boolean one)
        # for the backward, which takes it too
        out = torch.ops.aten._scaled_dot_product_cudnn_attention(
            q, k, v, attn_mask, True, dropout_p, is_causal, False, scale=scale
        )
        _cudnn_workspace(q.device)
        return out[0], label
    if backend == "flash":
        # takes fewer key/value heads natively (GQA): no expanded copies
        out = torch.ops.aten._scaled_dot_product_flash_attention(
            q, k, v, dropout_p, is_causal, False, scale=scale
        )
        return out[0], label
    if backend == "efficient":
        if attn_mask is not None:
            # SDPA expands the mask to (batch, heads, q, k): a learned bias broadcast over the
            # batch gets a gradient of that full size in backward
            b, h, sq, sk = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
            attn_mask = _aligned_bias(attn_mask).expand(b, h, sq, sk)
        out = torch.ops.aten._scaled_dot_product_efficient_attention(
            q, k, v, attn_mask, need_lse, dropout_p, is_causal, scale=scale
        )
        return out[0], label
    return _math(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa), label


def _cudnn_workspace(device: torch.device) -> None:
    """cuDNN's fused attention takes a 256-byte workspace once its outputs are allocated and
    frees it before it returns (H200 traces, torch 2.11: every call, training and inference;
    without it BERT-large fp16 inference packed its 2 MiB segments otherwise, 16 MiB low)."""
    workspace = torch.empty(256, dtype=torch.uint8, device=device)
    del workspace


def _like_query(q: torch.Tensor, dim: int) -> torch.Tensor:
    """An attention output laid out as the query is (fused kernels write it so: a query made
    by transposing (batch, seq, heads, dim) gives an output that needs no copy to go back)."""
    if dim == q.shape[-1]:
        return torch.empty_like(q)
    b, h, s, _ = q.shape
    if q.stride(1) < q.stride(2):  # (batch, seq, heads, dim) in memory
        return q.new_empty((b, s, h, dim)).transpose(1, 2)
    return q.new_empty((b, h, s, dim))


def _aligned_bias(mask: torch.Tensor) -> torch.Tensor:
    """The mask as ``preprocess_mask`` hands it to the memory-efficient kernel: where a
    stride but the last is not a multiple of 8 elements (or the last is not 1), a copy padded
    by ``8 - keys % 8`` columns and sliced back (attention.cpp, torch 2.11), which autograd
    keeps for backward like the mask itself. H100 op sweep: a (3, 6) float32 mask padded to
    96 bytes, forward and backward."""
    strides = mask.stride()
    if mask.dim() and strides[-1] == 1 and all(st % 8 == 0 for st in strides[:-1]):
        return mask
    keys = mask.shape[-1]
    return torch.nn.functional.pad(mask, (0, 8 - keys % 8))[..., :keys]


def _additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean mask made additive as SDPA makes it: ``where(mask, 0, -inf)`` from two
    scalar tensors, which go once it is made (the C++ makes its arguments right to left)."""
    neg_inf = torch.full((), -math.inf, dtype=dtype, device=mask.device)
    zero = torch.full((), 0.0, dtype=dtype, device=mask.device)
    additive = torch.where(mask, zero, neg_inf)
    del zero, neg_inf
    return additive


def _math(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
    enable_gqa: bool,
) -> torch.Tensor:
    """The math kernel op by op, as ``_scaled_dot_product_attention_math`` runs it on CUDA
    (torch 2.11): in its order, with its C++ locals held until it returns.

    Run here rather than through the composite so that its dropout is CUDA's fused one (a
    1-byte mask) and its mask is added in place (under any Python dispatch mode the composite
    adds it out of place); on meta the composite would also keep a dropout mask of the
    attention's dtype. The order matters to the caching allocator, not only the sizes: with
    the key and value expanded before the query was scaled and the causal mask made after the
    scores, an H200 trace of Qwen2.5-0.5B in float32 left its 20 MiB segments packed
    differently and reserved 20 MiB more than the replay.
    """
    origin = q.dtype
    # the math kernel keeps half inputs in float32 for accuracy (the default while
    # allow_fp16_bf16_reduction_math_sdp is off), and casts the results back
    qf, kf, vf = (x.float() for x in (q, k, v)) if origin in _HALF else (q, k, v)
    factor = math.sqrt(scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]))
    query = qf * factor
    if is_causal:
        causal = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        attn_mask = _additive(causal, qf.dtype)
        del causal
    key, value = kf, vf
    if enable_gqa and k.shape[-3] != q.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        key, value = kf.repeat_interleave(rep, dim=-3), vf.repeat_interleave(rep, dim=-3)
    attn = torch.matmul(query, key.transpose(-2, -1) * factor)
    if attn_mask is not None:
        attn = attn.add_(attn_mask)
    # its CUDA kernel is its composite (_cuda_composites): a boolean of the scores' size, one
    # per row and a scalar beside the softmax (H200 traces, torch 2.11: a 7 MiB boolean per
    # layer for Qwen2.5-0.5B at 2 x 512 in float32)
    attn = torch.ops.aten._safe_softmax(attn, -1)
    if dropout_p > 0.0:
        attn = torch.ops.aten.native_dropout(attn, dropout_p, True)[0]
    # the C++ evaluates the returned pair right to left: the weights are cast back first;
    # its locals go in the reverse of their making, the weights (returned, dropped by SDPA) last
    weights = attn.to(origin)
    out = torch.matmul(attn, value).to(origin)
    del attn, key, value, query, vf, kf, qf, attn_mask, weights
    return out
