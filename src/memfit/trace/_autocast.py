"""Emulated CUDA autocast for tracing on the meta device.

Real autocast lives in the dispatcher and only acts on CUDA tensors, so on meta tensors it does
nothing. This module reproduces what it does to memory: which ops run in the low precision
(their floating inputs are cast, and casts of leaf tensors that need grad are cached for the
autocast region), which run in float32, and which promote to the widest input type. The op
lists follow ``aten/src/ATen/autocast_mode.cpp`` (CUDA) in torch 2.11.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import torch
import torch.nn.functional as F

__all__ = [
    "AutocastState",
    "EmulatedAutocast",
    "autocast_cross_entropy",
    "autocast_policy",
    "cast_args",
    "entry_points_emulated",
    "suspended",
]

_Policy = str  # "lowp" | "fp32" | "fp32_opt_dtype" | "fp32_set_dtype" | "fp32_reduce" | "promote"


# CUDA autocast's op lists (aten/src/ATen/autocast_mode.cpp, torch 2.11), by where the Python
# entry point lives: torch.nn.functional (F), torch, and Tensor methods (T).
_LISTS: dict[_Policy, dict[str, str]] = {
    "lowp": {
        "F": "linear conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d "
        "prelu bilinear",
        "torch": "matmul mm bmm addmm addmv addr baddbmm addbmm mv einsum chain_matmul conv1d "
        "conv2d conv3d convolution conv_tbc prelu lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell",
        "T": "matmul __matmul__ __rmatmul__ mm bmm addmm addmv baddbmm addbmm mv addr",
    },
    # square is pow(x, 2) in C++, which autocast runs in float32 (H100, torch 2.11: the squared
    # ReLU of transformers' Arcee under bf16 autocast, a float32 copy and a float32 square)
    "fp32": {
        "F": "layer_norm group_norm softplus cosine_similarity nll_loss mse_loss l1_loss "
        "smooth_l1_loss huber_loss binary_cross_entropy_with_logits kl_div poisson_nll_loss "
        "cosine_embedding_loss hinge_embedding_loss margin_ranking_loss multilabel_margin_loss "
        "soft_margin_loss triplet_margin_loss multi_margin_loss multilabel_soft_margin_loss "
        "pdist interpolate grid_sample",
        "torch": "acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan "
        "pow square layer_norm group_norm nuclear_norm cosine_similarity dist pdist cdist renorm "
        "logsumexp cosine_embedding_loss hinge_embedding_loss kl_div margin_ranking_loss "
        "poisson_nll_loss triplet_margin_loss",
        "T": "acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow "
        "__pow__ __rpow__ square renorm logsumexp dist",
    },
    # norms are given dtype=float32 and read their half input as it is (fp32_set_opt_dtype,
    # fp32_append_dtype; make_reduction's half-to-float case): no cast copy (H100, torch
    # 2.11: Swin V2's F.normalize of q and k, ConvNeXt V2's GRN under bf16 autocast)
    "fp32_set_dtype": {
        "torch": "norm",
        "T": "norm",
        "linalg": "vector_norm matrix_norm norm",
    },
    "fp32_opt_dtype": {
        "torch": "softmax log_softmax cumprod cumsum",
        "T": "softmax log_softmax cumprod cumsum",
        "F": "softmax log_softmax",
    },
    # sum and prod are fp32_set_opt_dtype too, and their reductions read a half input as it is
    # into a float32 result: no cast copy (H200, torch 2.11: an involution network's
    # (weight * patches).sum(3) under bf16 autocast, 2.5 GB of bf16 summed without the 5 GB
    # float32 copy a cast would make)
    "fp32_reduce": {
        "torch": "prod sum",
        "T": "prod sum",
    },
    # torch 2.11's AT_FORALL_PROMOTE (ATen/autocast_mode.h): cat and stack are not in it (they
    # promote themselves, without a cast copy: ViT's class token joined to its bf16 patches)
    "promote": {
        "torch": "addcdiv addcmul atan2 bilinear cross dot grid_sampler tensordot index_put "
        "scatter_add vdot",
        "T": "addcdiv addcmul atan2 cross dot index_put scatter_add",
    },
}
_LOWP_EXTRA = ("multi_dot", "vecdot")  # torch.linalg


def _build_policy() -> dict[Callable[..., Any], _Policy]:
    spaces: dict[str, Any] = {"F": F, "torch": torch, "T": torch.Tensor, "linalg": torch.linalg}
    table: dict[Callable[..., Any], _Policy] = {}
    # later policies win where a name is listed twice, lowp last (as the C++ registration)
    for policy in ("promote", "fp32_opt_dtype", "fp32_reduce", "fp32_set_dtype", "fp32", "lowp"):
        for space, names in _LISTS[policy].items():
            for name in names.split():
                fn = getattr(spaces[space], name, None)
                if fn is not None:
                    table[fn] = policy
    for name in _LOWP_EXTRA:
        fn = getattr(torch.linalg, name, None)
        if fn is not None:
            table[fn] = "lowp"
    return table


_POLICY: dict[Callable[..., Any], _Policy] | None = None


def autocast_policy(func: Callable[..., Any]) -> _Policy | None:
    """The autocast policy of a torch function, or None if autocast leaves it alone."""
    global _POLICY
    if _POLICY is None:
        _POLICY = _build_policy()
    try:
        return _POLICY.get(func)
    except TypeError:  # unhashable callables
        return None


@dataclass
class AutocastState:
    """The emulated autocast of the current thread: on or off, its dtype, its cast cache."""

    enabled: bool = False
    dtype: torch.dtype = torch.bfloat16
    cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    depth: int = 0


_local = threading.local()
on_cached: Callable[[torch.Tensor], None] | None = None  # set by the tracer to label casts


def current_state() -> AutocastState:
    state = getattr(_local, "state", None)
    if state is None:
        state = _local.state = AutocastState()
    return state


@contextmanager
def suspended() -> Iterator[None]:
    """Autocast off inside a kernel it already handled (as the dispatcher's exclude guard)."""
    state = current_state()
    saved = state.enabled
    state.enabled = False
    try:
        yield
    finally:
        state.enabled = saved


def _is_float(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64


def _cast(t: Any, dtype: torch.dtype, state: AutocastState) -> Any:
    if not _is_float(t) or t.dtype == dtype:
        return t
    # autocast's cached_cast: leaves that need grad are cast once per autocast region.
    if t.is_leaf and t.requires_grad and dtype != torch.float32:
        hit = state.cache.get(id(t))
        if hit is not None and hit[0] is t:
            return hit[1]
        # made with autograd on even under no_grad, as the real cache's casts are: a weight's
        # cast first made in a no_grad region (HRM's early cycles) is reused where grad is on,
        # and still carries the weight's gradient (CPU autocast, torch 2.11; the H100 history
        # of HRM's training keeps the inputs those matmuls save)
        with torch.enable_grad() if not torch.is_inference_mode_enabled() else nullcontext():
            out = t.to(dtype)
        state.cache[id(t)] = (t, out)
        if on_cached is not None:
            on_cached(out)
        return out
    return t.to(dtype)


def _map(obj: Any, fn: Callable[[Any], Any]) -> Any:
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map(o, fn) for o in obj)
    return obj


def cast_args(
    policy: _Policy, args: tuple[Any, ...], kwargs: dict[str, Any], state: AutocastState
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Cast a call's floating tensors the way CUDA autocast would for ``policy``."""
    if policy == "lowp":
        target = state.dtype
    elif policy == "fp32":
        target = torch.float32
    elif policy == "fp32_set_dtype":
        # the wrapper sets the op's dtype where none is given and the first argument is a
        # floating tensor autocast acts on; no tensor is cast
        first = args[0] if args else None
        if kwargs.get("dtype") is not None or len(args) > 4 or not _is_float(first):
            return args, kwargs
        return args, {**kwargs, "dtype": torch.float32}
    elif policy == "fp32_reduce":
        # the wrapper sets the optional dtype to float32 where none is given and the first
        # argument is a floating tensor other than float64; nothing is cast
        first = args[0] if args else None
        if kwargs.get("dtype") is not None or not _is_float(first):
            return args, kwargs
        return args, {**kwargs, "dtype": torch.float32}
    elif policy == "fp32_opt_dtype":
        if kwargs.get("dtype") is not None:
            return args, kwargs
        target = torch.float32
    else:  # promote: to the widest floating type among the inputs
        dtypes = [t.dtype for t in _flat(args, kwargs) if _is_float(t)]
        if not dtypes:
            return args, kwargs
        target = torch.float32 if torch.float32 in dtypes else dtypes[0]
    # The C++ wrapper casts its arguments as one pack expansion, which GCC evaluates right to
    # left: the last argument's copy is allocated first (seen in H200 traces). Order matters
    # for where blocks land, hence for reserved memory.
    cast = lambda t: _cast(t, target, state)  # noqa: E731
    new_kwargs = {k: _map(kwargs[k], cast) for k in reversed(list(kwargs))}
    new_args = tuple(reversed([_map(a, cast) for a in reversed(args)]))
    return new_args, dict(reversed(list(new_kwargs.items())))


def _flat(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(x for x in a if isinstance(x, torch.Tensor))
    return out


def autocast_cross_entropy(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``cross_entropy_loss`` under CUDA autocast. It has no autocast rule, so it decomposes
    first: ``log_softmax(x, dim, dtype=x.dtype)`` keeps the low precision (its dtype is given),
    then ``nll_loss`` (a float32 op) casts the log-probabilities up and saves that copy.
    Returns None for label smoothing, which this does not decompose."""
    names = ("input", "target", "weight", "reduction", "ignore_index", "label_smoothing")
    values = dict(zip(names, args, strict=False))
    values.update(kwargs)
    x = values["input"]
    if float(values.get("label_smoothing", 0.0) or 0.0) > 0.0:
        return None
    dim = 1 if x.dim() > 1 else 0
    log_probs = torch.log_softmax(x, dim, dtype=x.dtype).float()
    weight = values.get("weight")
    if isinstance(weight, torch.Tensor):
        weight = weight.float()
    return torch._C._nn.nll_loss_nd(
        log_probs,
        values["target"],
        weight,
        values.get("reduction", 1),
        values.get("ignore_index", -100),
    )


# torchvision's own autocast kernels (torchvision/csrc/ops/autocast/*_kernel.cpp, 0.26-0.29):
# the floating inputs cast to float32, the op run with autocast off, then its output (the first
# one: roi_pool's argmax stays) cast back to the input's dtype; nms's indices are not cast
_TORCHVISION_FP32 = {
    "torchvision::roi_align": True,
    "torchvision::roi_pool": True,
    "torchvision::ps_roi_align": True,
    "torchvision::ps_roi_pool": True,
    "torchvision::deform_conv2d": True,
    "torchvision::nms": False,
}
NOT_LIBRARY = object()  # what :func:`library_autocast` returns for ops it does not run


def library_autocast(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A library op under CUDA autocast as the library's own autocast kernel runs it (see
    ``_TORCHVISION_FP32``); :data:`NOT_LIBRARY` for other ops. Without it a torchvision op
    would meet a bfloat16 feature map and float32 boxes, which its kernel refuses."""
    back = _TORCHVISION_FP32.get(getattr(func, "_qualified_op_name", ""))
    if back is None:
        return NOT_LIBRARY
    first = args[0] if args else None
    dtype = first.dtype if isinstance(first, torch.Tensor) else None
    args, kwargs = cast_args("fp32", args, kwargs, current_state())
    with suspended():
        out = func(*args, **kwargs)
    if not back or dtype is None:
        return out
    if isinstance(out, tuple):
        return (out[0].to(dtype), *out[1:])
    return out.to(dtype)


class EmulatedAutocast:
    """Stands in for ``torch.autocast`` during a trace; accepts any device type.

    Like the real one, leaving the outermost region clears the cast cache, so the cached
    low-precision weights are freed then.
    """

    def __init__(
        self,
        device_type: str = "cuda",
        dtype: torch.dtype | None = None,
        enabled: bool = True,
        cache_enabled: bool | None = None,
    ) -> None:
        self.device_type = device_type
        self.fast_dtype = dtype
        self._enabled = enabled and device_type in ("cuda", "meta")
        self._prev: tuple[bool, torch.dtype] | None = None

    def __enter__(self) -> EmulatedAutocast:
        state = current_state()
        self._prev = (state.enabled, state.dtype)
        if self.device_type in ("cuda", "meta"):
            state.enabled = self._enabled
            if self.fast_dtype is not None:
                state.dtype = self.fast_dtype
        state.depth += 1
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        state = current_state()
        state.depth -= 1
        if self._prev is not None:
            state.enabled, state.dtype = self._prev
        if state.depth == 0:
            state.cache.clear()

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with EmulatedAutocast(self.device_type, self.fast_dtype, self._enabled):
                return fn(*args, **kwargs)

        return wrapped


@contextmanager
def entry_points_emulated() -> Iterator[None]:
    """Swap torch's autocast entry points for the emulation, for cuda and meta devices.

    Activation checkpointing reads the autocast state at forward and re-enters it for the
    recomputation, so the queries must answer for the emulated state too.
    """
    names = ("autocast", "is_autocast_enabled", "get_autocast_dtype")
    saved_torch = {n: getattr(torch, n) for n in names}
    saved_amp = {n: getattr(torch.amp, n) for n in ("autocast", "is_autocast_available")}
    ours = ("cuda", "meta")

    def is_enabled(device_type: str | None = None) -> bool:
        if device_type is None or device_type in ours:
            return current_state().enabled
        return bool(saved_torch["is_autocast_enabled"](device_type))

    def get_dtype(device_type: str) -> torch.dtype:
        if device_type in ours:
            return current_state().dtype
        return saved_torch["get_autocast_dtype"](device_type)  # type: ignore[no-any-return]

    def is_available(device_type: str) -> bool:
        return device_type in ours or bool(saved_amp["is_autocast_available"](device_type))

    torch.autocast = EmulatedAutocast  # type: ignore[misc,assignment]
    torch.amp.autocast = EmulatedAutocast  # type: ignore[misc,assignment]
    torch.is_autocast_enabled = is_enabled
    torch.get_autocast_dtype = get_dtype
    torch.amp.is_autocast_available = is_available
    try:
        yield
    finally:
        for n, f in saved_torch.items():
            setattr(torch, n, f)
        for n, f in saved_amp.items():
            setattr(torch.amp, n, f)
