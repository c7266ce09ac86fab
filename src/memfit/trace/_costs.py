"""What each phase of a traced step asks of the host and the GPU: the inputs of the planner's
step-time model, counted while the trace runs, when asked for.

Each op the step dispatches is kept, in order, as an :data:`Op` ``(kind, flops, bytes)``:

* ``kind`` names what runs it: ``mm:<dtype>`` (matrix products; ``mm_a1``, ``mm_a2``,
  ``mm_a4`` for half-precision ones whose rows are not 16-byte aligned, which cuBLAS runs
  with kernels several times slower: a vocabulary of 50257), ``conv:<class>:<dtype>`` /
  ``conv_bwd:<class>:<dtype>`` (convolutions by shape class, :func:`conv_class`: cuDNN's rate
  differs by kernel and stride far more than by size), ``attn:<dtype>`` / ``attn_bwd:<dtype>``
  (fused attention; ``attn_dropout`` / ``attn_dropout_bwd`` with dropout inside the kernel),
  ``mem`` (any other kernel: its time is its traffic) or ``mem:<family>``
  (``mem:<family>:<dtype>``) for the memory-bound kernels that reach less of the bandwidth
  than an elementwise one (:data:`MEM_FAMILIES`: normalizations, softmax, reductions...),
  ``view`` (no kernel: the host's dispatch only) and ``sync`` (a value read back to the host,
  ``.item()``: the host waits for the GPU);
* ``flops`` from PyTorch's own formulas (``torch.utils.flop_counter``), halved for causal
  attention (the formula counts the masked half, which the fused kernels skip) and counting
  attention's scores in whole tiles (:func:`_tiled`);
* ``bytes``: the tensors it reads and writes (its inputs and outputs).

The model that turns these into seconds, with rates measured on the GPU, is the planner's
(``memfit.planner``): it needs the order, since the host issues ops ahead of the GPU and waits
for it at a sync.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

from memfit.trace._kernel_choice import cat_family, elementwise_family
from memfit.trace._leaves import tensors_in

__all__ = [
    "COPY_KINDS",
    "MEM_FAMILIES",
    "Op",
    "PhaseCost",
    "StepCosts",
    "conv_class",
    "is_copy",
    "mem_family",
    "mem_kind",
    "op_kind",
]

Op = tuple[str, int, int]  # (kind, flops, bytes)
# activation offload's ops on its side stream (``StepCosts.record_copy``): host-device copies,
# and the side stream's events (``copy_mark:3``) and the compute stream's waits for them
COPY_KINDS = ("d2h", "h2d", "copy_mark", "copy_wait")


def is_copy(kind: str) -> bool:
    """Whether an op's ``kind`` is one of activation offload's (:data:`COPY_KINDS`)."""
    return kind.partition(":")[0] in COPY_KINDS


aten = torch.ops.aten
_CONVOLUTIONS = {"convolution", "_convolution", "cudnn_convolution"}
_ATTENTION = {
    "_scaled_dot_product_flash_attention": "attn",
    "_scaled_dot_product_efficient_attention": "attn",
    "_scaled_dot_product_cudnn_attention": "attn",
    "_flash_attention_forward": "attn",
    "_efficient_attention_forward": "attn",
    "_scaled_dot_product_flash_attention_backward": "attn_bwd",
    "_scaled_dot_product_efficient_attention_backward": "attn_bwd",
    "_scaled_dot_product_cudnn_attention_backward": "attn_bwd",
    "_flash_attention_backward": "attn_bwd",
    "_efficient_attention_backward": "attn_bwd",
}
# memory-bound ops whose kernels are not elementwise, by family: each family's share of the
# bandwidth is the calibration's (``mem_factors``), fitted on profiled training steps
MEM_FAMILIES: dict[str, tuple[str, ...]] = {
    "norm": (
        "native_layer_norm",
        "native_layer_norm_backward",
        "native_group_norm",
        "native_group_norm_backward",
        "_fused_rms_norm",
        "_fused_rms_norm_backward",
    ),
    "bn": (
        "native_batch_norm",
        "native_batch_norm_backward",
        "cudnn_batch_norm",
        "cudnn_batch_norm_backward",
        "_native_batch_norm_legit",
        "_native_batch_norm_legit_functional",
        "_native_batch_norm_legit_no_training",
        "batch_norm_backward",
    ),
    "softmax": ("_softmax", "_log_softmax", "_softmax_backward_data", "_log_softmax_backward_data"),
    "reduce": (
        "sum",
        "mean",
        "amax",
        "amin",
        "max",
        "min",
        "var",
        "var_mean",
        "std",
        "linalg_vector_norm",
        "norm",
        "prod",
        "argmax",
        "argmin",
    ),
    # concatenations (``cat_strided`` for those CUDA runs with its strided kernel: cat_family)
    "cat": ("cat", "stack"),
    "index": (
        "embedding",
        "embedding_dense_backward",
        "index_select",
        "index",
        "index_put",
        "index_put_",
        "index_add",
        "index_add_",
        "gather",
        "scatter",
        "scatter_add",
        "scatter_add_",
    ),
    "loss": ("nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward", "nll_loss2d_backward"),
    "pool": (
        "max_pool2d_with_indices",
        "max_pool2d_with_indices_backward",
        "avg_pool2d",
        "avg_pool2d_backward",
        "_adaptive_avg_pool2d",
        "_adaptive_avg_pool2d_backward",
    ),
    "copy": ("_to_copy", "copy_", "clone"),
    # a compiled step's triton kernels (no aten op: ``StepCosts.record_kernel``), whose fused
    # pointwise and reduction work reaches its own share of the bandwidth
    "fused": (),
}
_FAMILY_OF = {name: family for family, names in MEM_FAMILIES.items() for name in names}
_ALIGNED = 8  # elements: cuBLAS's fast half-precision kernels want rows of 16 bytes
_SYNCS = {aten._local_scalar_dense.default, aten.is_nonzero.default}
# ops that launch no kernel though PyTorch does not call them views: they only allocate (a
# compiled wrapper's buffers: the caching allocator), or reinterpret a fresh tensor
# (``_unsafe_view``: a matrix product's result folded back to its batch dimensions, every
# bias-free ``Linear`` on a 3-d input)
_ALLOCATES_ONLY = {
    aten._unsafe_view.default,
    aten.empty.memory_format,
    aten.empty_strided.default,
    aten.empty_like.default,
    aten.new_empty.default,
    aten.new_empty_strided.default,
}
_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}


@dataclass
class PhaseCost:
    """One phase's ops, in the order they were dispatched, and their totals."""

    ops: list[Op] = field(default_factory=list)

    @property
    def tensor_core_flops(self) -> int:
        """FLOPs of half-precision products, attention and float32 convolutions (TF32)."""
        return sum(f for k, f, _ in self.ops if f and not k.startswith("mm:fp32"))

    @property
    def fp32_flops(self) -> int:
        """FLOPs of float32 matrix products (CUDA cores: PyTorch allows no TF32 by default)."""
        return sum(f for k, f, _ in self.ops if k == "mm:fp32")

    @property
    def bytes(self) -> int:
        return sum(b for _, _, b in self.ops)

    @property
    def kernels(self) -> int:
        return sum(1 for k, _, _ in self.ops if k not in ("view", "sync") and not is_copy(k))

    def add(self, other: PhaseCost) -> None:
        self.ops.extend(other.ops)


@dataclass
class StepCosts:
    """Ops by phase name (``step2.backward``...), as the trace's phases are named."""

    phases: dict[str, PhaseCost] = field(default_factory=dict)
    parameter_tensors: int = 0  # trained parameter tensors (an optimizer loops over them)
    compiled: bool = False  # the model ran inductor's wrappers (few, fused kernels per op)

    def record(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, phase: str
    ) -> None:
        """Keep one op of ``phase`` (called from the trace's dispatch, outputs known)."""
        ops = self.phases.setdefault(phase, PhaseCost()).ops
        if func in _SYNCS:  # a value read back: from the GPU only a GPU tensor's waits for it
            on_host = isinstance(args[0], torch.Tensor) and args[0].device.type == "cpu"
            ops.append(("view" if on_host else "sync", 0, 0))
            return
        if getattr(func, "is_view", False) or func in _ALLOCATES_ONLY:
            ops.append(("view", 0, 0))  # no kernel: the host's dispatch only
            return
        outputs = _nbytes(tensors_in(out))
        nbytes = _nbytes(tensors_in((args, kwargs))) + (outputs or _written(func, args))
        flops = _flops(func, args, kwargs, out)
        kind = op_kind(func, args, kwargs) if flops else mem_kind(func, args, out)
        ops.append((kind, flops, nbytes))

    def record_inplace_foreach(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], phase: str
    ) -> None:
        """Keep an in-place foreach op (``_foreach_add_``...) as the one kernel it is on CUDA:
        it reads every tensor it is given and writes the first list."""
        nbytes = _nbytes(tensors_in((args, kwargs))) + _nbytes(tensors_in(args[:1]))
        self.phases.setdefault(phase, PhaseCost()).ops.append(("mem", 0, nbytes))

    def record_kernel(self, family: str, moved: list[tuple[torch.Tensor, int]], phase: str) -> None:
        """Keep a kernel no op dispatched (a compiled wrapper's triton kernel) as one
        ``mem:<family>:<dtype>`` op: its traffic is each tensor's bytes times how often it
        moves; its dtype the largest tensor's."""
        nbytes = sum(t.numel() * t.element_size() * n for t, n in moved)
        largest = max(moved, key=lambda m: m[0].numel() * m[0].element_size(), default=None)
        dtype = _DTYPES.get(largest[0].dtype, "fp32") if largest is not None else "fp32"
        self.phases.setdefault(phase, PhaseCost()).ops.append((f"mem:{family}:{dtype}", 0, nbytes))

    def record_copy(self, kind: str, number: int, nbytes: int, phase: str) -> None:
        """Keep one of activation offload's side-stream ops (:data:`COPY_KINDS`): a copy of
        ``nbytes`` (``d2h``, ``h2d``), or event ``number`` marked on the side stream
        (``copy_mark:<number>``) or waited for by the compute stream (``copy_wait:<number>``)."""
        name = f"{kind}:{number}" if kind in ("copy_mark", "copy_wait") else kind
        self.phases.setdefault(phase, PhaseCost()).ops.append((name, 0, nbytes))

    def copy(self, names: Iterable[tuple[str, str]]) -> None:
        """Add the ops of each phase ``(source, target)`` again under ``target`` (a later
        step's passes copied from step 1's events)."""
        for source, target in set(names):
            cost = self.phases.get(source)
            if cost is not None:
                self.phases.setdefault(target, PhaseCost()).add(cost)

    def total(self, prefix: str = "") -> PhaseCost:
        """The ops of the phases whose names start with ``prefix`` (``step2.``: one step)."""
        out = PhaseCost()
        for name, cost in self.phases.items():
            if name.startswith(prefix):
                out.add(cost)
        return out


def op_kind(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None) -> str:
    """The kind of an op that does arithmetic (PyTorch has a FLOP formula for it)."""
    name = func.overloadpacket.__name__
    dtype = _DTYPES.get(_first_dtype(args), "fp32")  # type: ignore[arg-type]
    if name in _ATTENTION:
        family = _ATTENTION[name]
        if (_bound(func, args, kwargs).get("dropout_p") or 0.0) > 0.0:
            # dropout inside the fused kernel draws and applies a mask per score: cuDNN's
            # forward ran 2.4 times slower with it (BERT's 0.1, profiled on an H200:
            # benchmarks/results/2026-12-03-h200-calibrate-attention-tiles)
            family = family.replace("attn", "attn_dropout")
        return f"{family}:{dtype}"
    if name in _CONVOLUTIONS:
        return f"conv:{conv_class(func, args, kwargs)}:{dtype}"
    if name == "convolution_backward":
        return f"conv_bwd:{conv_class(func, args, kwargs)}:{dtype}"
    if dtype in ("bf16", "fp16"):
        align = _alignment(args)
        if align < _ALIGNED:
            return f"mm_a{align}:{dtype}"
    return f"mm:{dtype}"


def mem_kind(func: Any, args: tuple[Any, ...], out: Any = None) -> str:
    """The kind of an op without arithmetic: ``mem:<family>:<dtype>`` (:data:`MEM_FAMILIES`;
    cuDNN's batch norm takes three times longer in bfloat16 than in float32; a concatenation
    by the kernel CUDA picks for it, ``_kernel_choice.cat_family``; a backward op in a family of
    its own, :func:`mem_family`), else an elementwise op: ``mem`` where CUDA runs it vectorized,
    else ``mem:ew_strided:<dtype>`` / ``mem:ew_unrolled:<dtype>``
    (``_kernel_choice.elementwise_family``)."""
    name = func.overloadpacket.__name__
    family = mem_family(name)
    if family is None:
        family = elementwise_family(tensors_in(args), tensors_in(out))
        if not family:
            return "mem"
    elif family == "cat":
        family = cat_family(args[0], _dim(args), stacked=name == "stack")
    return f"mem:{family}:{_DTYPES.get(_first_dtype(args), 'fp32')}"  # type: ignore[arg-type]


def mem_family(name: str) -> str | None:
    """The :data:`MEM_FAMILIES` family of the op ``name`` (``native_layer_norm``), with
    ``_bwd`` for a backward op (``native_layer_norm_backward``: ``norm_bwd``), whose kernels
    are others than its forward's (a layer norm's backward also reduces the weight's gradient
    over the batch); ``None`` for an op of none."""
    family = _FAMILY_OF.get(name)
    if family is not None and name.endswith(("_backward", "_backward_data")):
        return f"{family}_bwd"
    return family


def _dim(args: tuple[Any, ...]) -> int:
    dim = args[1] if len(args) > 1 else 0
    return int(dim) if isinstance(dim, int) else 0


def _alignment(args: tuple[Any, ...]) -> int:
    """The largest power of two, at most 8, dividing the row stride of every matrix a matrix
    product reads (its last two dimensions; a transposed operand's rows are its columns) and
    the row of its result (the last size of its last operand)."""
    align = _ALIGNED
    matrices = [a for a in tensors_in(args) if a.dim() >= 2]
    for t in matrices:
        rows, cols = t.stride()[-2], t.stride()[-1]
        align = min(align, _power_of_two(rows if cols == 1 else cols))
    if matrices:
        align = min(align, _power_of_two(matrices[-1].shape[-1]))
    return align


def _power_of_two(n: int) -> int:
    n = int(n)
    return _ALIGNED if n <= 0 else min(_ALIGNED, n & -n)


def conv_class(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None) -> str:
    """A convolution's shape class, the key of its measured curve: ``k<kernel>`` and, where not
    1, ``s<stride>`` (``k1``, ``k3``, ``k3s2``, ``k7s2``, ``k16s16``; ``k3x1`` for a kernel whose
    sides differ), then ``t`` for a transposed convolution and ``dw`` (depthwise) or ``g``
    (grouped), and ``cl`` after ``dw`` for a depthwise one in channels-last memory (cuDNN runs
    those with NHWC kernels about 4x faster: ConvNeXt's). The step-time model reads the
    class's curve, or the nearest one measured. ``k3`` when the arguments cannot be read (any
    convolution is timed, none fails)."""
    bound = _bound(func, args, kwargs)
    weight = bound.get("weight")
    if not isinstance(weight, torch.Tensor) or weight.dim() < 3:
        return "k3"
    kernel = _sides(list(weight.shape[2:]))
    stride = bound.get("stride") or [1]
    if isinstance(stride, int):
        stride = [stride]
    strides = _sides([int(s) for s in stride])
    out = f"k{kernel}" + ("" if strides == "1" else f"s{strides}")
    if bound.get("transposed"):
        out += "t"
    groups = int(bound.get("groups") or 1)
    if groups > 1:
        out += "dw" if weight.shape[1] == 1 else "g"
    if out.endswith("dw") and _channels_last(bound.get("input")):
        out += "cl"
    return out


def _channels_last(t: Any) -> bool:
    """Whether a 4-d tensor with more than one channel is laid out channels-last."""
    return (
        isinstance(t, torch.Tensor)
        and t.dim() == 4
        and t.shape[1] > 1
        and t.is_contiguous(memory_format=torch.channels_last)
        and not t.is_contiguous()
    )


def _sides(sizes: list[int]) -> str:
    """``3`` for ``[3, 3]``, ``3x1`` for ``[3, 1]``."""
    return str(sizes[0]) if len(set(sizes)) == 1 else "x".join(map(str, sizes))


def _flops(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> int:
    """The op's FLOPs by PyTorch's formula (0 without one). Attention with fewer key/value heads
    than query heads (grouped-query attention passed with ``enable_gqa``, as transformers 5.17
    does) is refused by the formula, which wants equal heads; the kernel computes every query
    head's scores all the same, so it is counted with the key and value heads widened."""
    formula = _formula(func)
    if formula is None:
        return 0
    name = func.overloadpacket.__name__
    product = _PRODUCTS.get(name)
    if product is not None and not kwargs:  # the formula's own sum, without its shape walk
        first, count = product
        return count(args[first], args[first + 1])
    try:
        flops = int(formula(*args, **kwargs, out_val=out))
    except AssertionError:
        if name not in _ATTENTION:
            raise
        flops = int(formula(*_widened_heads(args), **kwargs, out_val=out))
    if name == "convolution_backward":
        grouped = _grouped_backward_flops(func, args, kwargs)
        return flops if grouped is None else min(flops, grouped)
    if name in _ATTENTION:
        bound = _bound(func, args, kwargs)
        flops = _tiled(name, bound, flops)
        if bound.get("is_causal"):
            return flops // 2  # the fused kernels skip the masked half; the formula counts it
    return flops


# the tiles fused attention computes scores in, (queries, keys), forward and backward: cuDNN's
# sm90 kernels that PyTorch 2.11 picks on an H200 (``64x128x64`` forward, ``64x64x64``
# backward, profiled in benchmarks/results/2026-12-03-h200-calibrate-attention-tiles);
# flash-attention's are as large or larger
_TILES = {"attn": (64, 128), "attn_bwd": (64, 64)}


def _tiled(name: str, bound: dict[str, Any], flops: int) -> int:
    """Attention's FLOPs as its kernel computes them: the score matrix in whole tiles, so a
    sequence that is not a multiple of the tile is padded (ViT-B/16's 197 tokens compute as
    256: 1.69 times the formula, which the profile's kernel times showed). Only
    ``_scaled_dot_product_*`` ops, whose tensors are (batch, heads, tokens, head dim)."""
    query, key = bound.get("query"), bound.get("key")
    if not name.startswith("_scaled_dot_product") or not all(
        isinstance(t, torch.Tensor) and t.dim() == 4 for t in (query, key)
    ):
        return flops
    assert isinstance(query, torch.Tensor) and isinstance(key, torch.Tensor)
    tile_q, tile_k = _TILES[_ATTENTION[name]]
    s_q, s_k = query.shape[-2], key.shape[-2]
    if not s_q or not s_k:
        return flops
    padded = -(-s_q // tile_q) * tile_q * (-(-s_k // tile_k) * tile_k)
    return flops * padded // (s_q * s_k)


def _grouped_backward_flops(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """A convolution's backward as the forward's FLOPs once per gradient asked for (None where
    its arguments cannot be read). PyTorch's formula counts the weight's gradient of a grouped
    convolution as if it were dense: a depthwise 7x7 layer of 768 channels 768 times over
    (ConvNeXt's backward came out 25 times its measured time)."""
    bound = _bound(func, args, kwargs)
    grad, weight, mask = bound.get("grad_output"), bound.get("weight"), bound.get("output_mask")
    if not isinstance(grad, torch.Tensor) or not isinstance(weight, torch.Tensor) or not mask:
        return None
    image = bound["input"] if bound.get("transposed") else grad
    forward = 2 * grad.shape[0] * weight.numel() * math.prod(image.shape[2:])
    return forward * (int(bool(mask[0])) + int(bool(mask[1])))


def _bound(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """An op's arguments by their schema's names."""
    schema = getattr(func, "_schema", None)
    names = [a.name for a in schema.arguments] if schema is not None else []
    return {**dict(zip(names, args, strict=False)), **(kwargs or {})}


def _widened_heads(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Every 4-D tensor argument with fewer heads (dim 1) than the most, given the most."""
    heads = max(a.shape[1] for a in args if isinstance(a, torch.Tensor) and a.dim() == 4)
    with _disable_current_modes():  # shapes for the formula, not allocations of the step
        return tuple(
            torch.empty((a.shape[0], heads, *a.shape[2:]), dtype=a.dtype, device="meta")
            if isinstance(a, torch.Tensor) and a.dim() == 4 and a.shape[1] < heads
            else a
            for a in args
        )


def _formula(func: Any) -> Any:
    """PyTorch's FLOP formula of ``func``'s op (None without one), looked up once per op."""
    try:
        return _FORMULAS[func]
    except KeyError:
        from torch.utils.flop_counter import flop_registry

        packet = getattr(func, "overloadpacket", None)
        found = flop_registry.get(packet) if packet is not None else None
        _FORMULAS[func] = found
        return found


_FORMULAS: dict[Any, Any] = {}


def _mm(a: torch.Tensor, b: torch.Tensor) -> int:
    return 2 * a.shape[0] * a.shape[1] * b.shape[1]


def _bmm(a: torch.Tensor, b: torch.Tensor) -> int:
    return 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]


# matrix products counted as PyTorch's formulas count them (2 x m x n x k; a bias is not
# counted), from their shapes directly: the formulas' argument walk was about a third of the
# time spent recording costs. By op: where its two matrices start among the arguments, and
# the count.
_PRODUCTS: dict[str, tuple[int, Callable[[torch.Tensor, torch.Tensor], int]]] = {
    "mm": (0, _mm),
    "addmm": (1, _mm),
    "bmm": (0, _bmm),
    "baddbmm": (1, _bmm),
}


def _nbytes(tensors: Iterable[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _written(func: Any, args: tuple[Any, ...]) -> int:
    """The bytes an op that returns nothing writes into its arguments (``_fused_adamw_``)."""
    schema = getattr(func, "_schema", None)
    if schema is None:
        return 0
    written = [
        a
        for a, arg in zip(args, schema.arguments, strict=False)
        if arg.alias_info is not None and arg.alias_info.is_write
    ]
    return _nbytes(tensors_in(written))


def _first_dtype(args: tuple[Any, ...]) -> torch.dtype | None:
    found = tensors_in(args)
    return found[0].dtype if found else None
