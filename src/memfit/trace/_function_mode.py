"""The torch-function layer of a trace: what the GPU would do that meta tensors would not.

It runs above autograd, so what it changes is recorded by autograd like the real thing:

* devices: ``cuda`` in a device argument, ``.to("cuda")`` and ``.cuda()`` become ``meta``;
* autocast: inside an emulated autocast region, inputs are cast per CUDA autocast's op lists
  (torchvision's ops per its own autocast kernels);
* attention: ``scaled_dot_product_attention`` runs the kernel the target GPU would pick;
* mish: its backward allocates what CUDA's fused kernel does (``_mish``);
* RMS norm: CUDA's one fused kernel, forward and backward (``_rms_norm``);
* batch norm: cuDNN's, on a contiguous copy of a strided input (``_cudnn_batch_norm``);
* CTC loss: its arguments as given are shown to the trace, which notes where a GPU may run
  cuDNN's kernel instead of PyTorch's (its arguments decide, before ATen converts them).

Python-level torch functions (``F.multi_head_attention_forward``, ``F.layer_norm``...) are run
with the mode still active, so the builtins they call are seen too.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from memfit.trace import _autocast
from memfit.trace._cudnn_batch_norm import BATCH_NORM, cudnn_batch_norm_input
from memfit.trace._host_data import HOST_DATA_FUNCS, from_host_data
from memfit.trace._mish import mish
from memfit.trace._rms_norm import fused_rms_norm
from memfit.trace._rnn import (
    OTHER_RNN_FUNCTIONS,
    RnnHooks,
    cudnn_rnn,
    cudnn_rnn_autocast,
    note_cell_kernels,
    rnn_kind,
)
from memfit.trace._sdpa import run_sdpa

__all__ = ["TraceFunctionMode", "python_function_reentry"]

_META = torch.device("meta")
_local = threading.local()


def _is_cuda(obj: Any) -> bool:
    if isinstance(obj, torch.device):
        return obj.type == "cuda"
    return isinstance(obj, str) and (obj == "cuda" or obj.startswith("cuda:"))


def _to_meta(obj: Any) -> Any:
    return _META if _is_cuda(obj) else obj


_SDPA = getattr(F, "scaled_dot_product_attention", None)
_DROPOUTS = {F.dropout, torch.dropout}
_CROSS_ENTROPY = torch._C._nn.cross_entropy_loss
_LINEAR = torch._C._nn.linear
_CTC_LOSS = torch.ctc_loss
_RMS_NORM = torch.rms_norm


def _linear_with_inplace_bias(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``F.linear`` on a non-contiguous input of 3 or more dimensions: a real run computes
    ``matmul`` and adds the bias in place. ATen adds out of place for tensor subclasses, and
    under any Python dispatch mode every tensor counts as one, so the meta trace would allocate
    the whole output a second time (2 GB for an LSTM LM's vocabulary head). None: not this case.
    """
    x = args[0] if args else kwargs.get("input")
    weight = args[1] if len(args) > 1 else kwargs.get("weight")
    bias = args[2] if len(args) > 2 else kwargs.get("bias")
    if weight is None:
        return None
    if bias is None or not isinstance(x, torch.Tensor) or x.dim() == 2 or x.is_contiguous():
        return None  # addmm, on the flattened input when contiguous: no second output
    out = torch.matmul(x, weight.t())
    return out.add_(bias)


_SOFTMAXES = {
    torch.softmax: False,
    torch.log_softmax: True,
    F.softmax: False,
    F.log_softmax: True,
    torch.Tensor.softmax: False,
    torch.Tensor.log_softmax: True,
}


def _half_to_float_softmax(
    func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """CUDA's ``softmax(half, dtype=float)`` reads the half input directly (``half_to_float``);
    on meta the composite first copies the input to float32. Returns None otherwise."""
    x = args[0] if args else kwargs.get("input")
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    dtype = kwargs.get(
        "dtype", args[-1] if len(args) > 2 and func not in (F.softmax, F.log_softmax) else None
    )
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float16 or dim is None:
        return None
    if dtype != torch.float32:
        return None
    if _SOFTMAXES[func]:
        return torch._log_softmax(x, dim, True)
    return torch._softmax(x, dim, True)


# in-place fused optimizer kernels with no meta kernel in torch 2.11-2.14 (SGD's fused step;
# its momentum buffers are made in Python, before the call)
_NO_META = frozenset({"_fused_sgd_"})


def _is_inplace_foreach(func: Any) -> bool:
    name = getattr(func, "__name__", "")
    return name.startswith("_foreach_") and name.endswith("_")


def _is_low(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.dtype in (torch.float16, torch.bfloat16)


def _fused_dropout(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """CUDA's dropout: ``native_dropout`` with a 1-byte mask; on meta the composite would build
    a mask of the input's dtype (4x larger in fp32). Returns None where CUDA would not fuse."""
    x = args[0] if args else kwargs.get("input")
    p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
    train_key = "training" if func is F.dropout else "train"
    training = args[2] if len(args) > 2 else kwargs.get(train_key, True)
    inplace = args[3] if len(args) > 3 else kwargs.get("inplace", False)
    if not isinstance(x, torch.Tensor) or not training or inplace or not 0 < p < 1:
        return None
    if x.numel() == 0:
        return None
    return torch.ops.aten.native_dropout(x, float(p), True)[0]


_CUDA_METHODS = {torch.Tensor.cuda}
_TB = torch._C.TensorBase
# reads of a tensor's metadata, which the mode leaves as they are (no device, no autocast, no
# tensor to stamp): answered first, as they are most of its calls (shapes in model code)
_METADATA_PROPERTIES = ("shape", "dtype", "device", "layout", "ndim", "is_sparse")
_METADATA_METHODS = ("numel", "size", "stride", "storage_offset", "dim", "is_contiguous")
_METADATA = frozenset(
    [getattr(_TB, n).__get__ for n in _METADATA_PROPERTIES]
    + [getattr(_TB, n) for n in (*_METADATA_METHODS, "element_size", "is_floating_point")]
    + [_TB.untyped_storage]
)


RANDOM_NOTE = (
    "a random number drawn on the host in the step (torch.rand: layer drop) was answered at the "
    "top of its range: every layer it may skip runs, the most a step holds"
)
_TOP_OF_RANGE = 1.0 - 2.0**-24  # the largest float32 torch.rand draws


def _size_of(args: tuple[Any, ...]) -> list[int]:
    """``torch.rand``'s size, given as a sequence or as separate integers."""
    if len(args) == 1 and isinstance(args[0], (list, tuple, torch.Size)):
        return [int(n) for n in args[0]]
    return [int(n) for n in args if isinstance(n, int)]


def _host_scalar(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a ``torch.rand`` call draws one number (or none) on the host."""
    device = kwargs.get("device")
    if device is not None and torch.device(device).type != "cpu":
        return False
    if kwargs.get("out") is not None or not all(
        isinstance(a, (int, list, tuple, torch.Size)) for a in args
    ):
        return False
    size = 1
    for n in _size_of(args):
        size *= n
    return size <= 1


class TraceFunctionMode(TorchFunctionMode):
    """Rewrites devices, emulates autocast and picks the attention kernel (see module doc)."""

    def __init__(
        self,
        sm: int,
        on_sdpa: Callable[[str], None] | None = None,
        on_output: Callable[[Any], None] | None = None,
        fused_inplace: Callable[[Any, tuple[Any, ...], dict[str, Any]], Any] | None = None,
        rnn: RnnHooks | None = None,
        ctc_loss: Callable[[tuple[Any, ...], dict[str, Any]], None] | None = None,
    ) -> None:
        super().__init__()
        self.rnn = rnn
        self.ctc_loss = ctc_loss  # shown each torch.ctc_loss call, its arguments as given
        self.sm = sm
        self.on_sdpa = on_sdpa
        self.on_output = on_output
        self.fused_inplace = fused_inplace
        self.notes: set[str] | None = None  # where what it assumed is said

    def _top_of_range(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor:
        """A host random scalar (``torch.rand([])``: transformers' layer drop, 45 models,
        each ``if draw < layerdrop: skip the layer``) answered at the top of its range: every
        layer runs, the most a step can hold (H100, torch 2.11: Canary's training skipped
        layers as its draws fell, on the GPU and in the trace alike, each its own)."""
        if self.notes is not None:
            self.notes.add(RANDOM_NOTE)
        dtype = kwargs.get("dtype") or torch.get_default_dtype()
        return torch.full(_size_of(args), _TOP_OF_RANGE, dtype=dtype)

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types_: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if _local.__dict__.get("skip_check") and _local.__dict__.get("reentering") is not func:
            _local.skip_check = False  # a re-entered body reached an op: its checks count again
            _local.reentering = None
        if func in _METADATA:
            return func(*args, **(kwargs or {}))
        if func is torch.rand and _host_scalar(args, kwargs or {}):
            return self._top_of_range(args, kwargs or {})
        kwargs = dict(kwargs or {})
        if "device" in kwargs:
            kwargs["device"] = _to_meta(kwargs["device"])
        if func in _CUDA_METHODS:
            return args[0].to(_META)
        if func is torch.Tensor.to or func is torch.Tensor.new_empty:
            args = tuple(_to_meta(a) for a in args)
        if func in HOST_DATA_FUNCS:  # torch.tensor(data) on the GPU, .numpy() read back
            made = from_host_data(func, args, kwargs)
            if made is not None:
                return made
        state = _autocast.current_state()
        if state.enabled and func is _CROSS_ENTROPY and _is_low(args[0] if args else None):
            with self:
                out = _autocast.autocast_cross_entropy(args, kwargs)
            if out is not None:
                return out
        if state.enabled:
            out = _autocast.library_autocast(func, args, kwargs)  # torchvision's own rules
            if out is not _autocast.NOT_LIBRARY:
                return self._stamped(out)
            policy = _autocast.autocast_policy(func)
            if policy is not None:
                args, kwargs = _autocast.cast_args(policy, args, kwargs, state)
        if func is BATCH_NORM:  # cuDNN's runs on a contiguous copy, which autograd keeps
            args = cudnn_batch_norm_input(args, kwargs)
        if func is _LINEAR:
            out = _linear_with_inplace_bias(args, kwargs)
            if out is not None:
                return self._stamped(out)
        if func in _SOFTMAXES:
            out = _half_to_float_softmax(func, args, kwargs)
            if out is not None:
                return out
        if func in _DROPOUTS:
            with self:
                out = _fused_dropout(func, args, kwargs)
            if out is not None:
                return out
        if func is F.mish:
            with self:
                out = mish(args, kwargs)
            if out is not None:
                return self._stamped(out)
        if func is _RMS_NORM:
            with self:
                out = fused_rms_norm(args, kwargs)
            if out is not None:
                return self._stamped(out)
        if func is _SDPA:
            if state.enabled:
                args, kwargs = _autocast.cast_args("lowp", args, kwargs, state)
            with self, _autocast.suspended():
                out, backend = run_sdpa(args, kwargs, self.sm)
            if self.on_sdpa is not None:
                self.on_sdpa(backend)
            return out
        kind = rnn_kind(func) if self.rnn is not None else None
        if kind is not None and self.rnn is not None:
            if state.enabled:  # autocast's own cuDNN wrapper: fp16, whatever autocast's dtype
                with _autocast.suspended():
                    out = cudnn_rnn_autocast(args, self.rnn, kind)
            else:
                out = cudnn_rnn(args, self.rnn, kind)
            if out is not None:
                return self._stamped(out)
        elif self.rnn is not None and any(func is f for f in OTHER_RNN_FUNCTIONS):
            note_cell_kernels(func, self.rnn)
        if func is _CTC_LOSS and self.ctc_loss is not None:
            self.ctc_loss(args, kwargs)  # which CUDA kernel runs it depends on them
        if isinstance(func, types.FunctionType):
            return self._reenter(func, args, kwargs)
        if self.fused_inplace is not None and _is_inplace_foreach(func):
            # one fused CUDA kernel, no allocation; on meta some run as out-of-place pieces
            with self.fused_inplace(func, args, kwargs):
                return func(*args, **kwargs)
        if self.fused_inplace is not None and getattr(func, "__name__", "") in _NO_META:
            # an in-place fused kernel torch has no meta kernel for: it allocates nothing
            with self.fused_inplace(func, args, kwargs):
                return None
        return self._stamped(func(*args, **kwargs))

    def _stamped(self, out: Any) -> Any:
        """``out``, after telling the module tracker about it (backward attribution)."""
        if self.on_output is not None:
            self.on_output(out)
        return out

    def _reenter(
        self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Run a Python-level torch function's body with this mode still on."""
        active: list[Any] = _local.__dict__.setdefault("active", [])
        if getattr(_local, "reentering", None) is func:
            # its module's has_torch_function was not patched yet: patch it and retry
            _local.reentering = None
            _local.skip_check = False
            if not _patch_wrapped_globals(func):
                return func(*args, **kwargs)
        elif active and active[-1] is func:
            # the body called the same op's builtin (``super().unflatten``): run it plainly
            return func(*args, **kwargs)
        _local.skip_check = True
        _local.reentering = func
        active.append(func)
        try:
            with self:
                return func(*args, **kwargs)
        finally:
            active.pop()
            _local.skip_check = False  # a body that reached no op: the checks after it count
            _local.reentering = None


def _skippable(check: Callable[..., bool]) -> Callable[..., bool]:
    def wrapped(*args: Any) -> bool:
        # every check before the re-entered body reaches an op answers False: a function that
        # calls another of its module first (torch 2.11's unique: _return_output, then
        # _unique_impl) must not dispatch the inner one back to the mode, which would give the
        # public function's result where the outer body unpacks the inner one's
        if getattr(_local, "skip_check", False):
            return False
        return check(*args)

    return wrapped


def _patch_wrapped_globals(func: Callable[..., Any]) -> bool:
    """Patch the checks of ``func``'s module and of every function it wraps (``__wrapped__``,
    as ``functools.wraps`` sets): torch hands the mode the public name's object, and where that
    is a wrapper defined elsewhere (memfit's own watch on ``torch.autograd.backward``, a user's
    decorator), the check that sent the call here is in the wrapped function's module. Without
    it the body would run with the mode off: a whole backward, and the recomputation of
    checkpointed blocks in it, would run meta's kernels instead of the target GPU's."""
    done = False
    seen: set[int] = set()
    current: Any = func
    while isinstance(current, types.FunctionType) and id(current) not in seen:
        seen.add(id(current))
        done = _patch_globals(current.__globals__) or done
        current = getattr(current, "__wrapped__", None)
    return done


_CHECK_NAMES = ("has_torch_function", "has_torch_function_unary", "has_torch_function_variadic")


_patched: list[tuple[dict[str, Any], str, Any]] = []
_patching = False


def _patch_globals(namespace: dict[str, Any]) -> bool:
    """Make a module's has_torch_function checks skippable; False if nothing was patched."""
    if not _patching:
        return False
    done = False
    for name in _CHECK_NAMES:
        original = namespace.get(name)
        if original is not None and not getattr(original, "_memfit_skippable", False):
            wrapped = _skippable(original)
            wrapped._memfit_skippable = True  # type: ignore[attr-defined]
            _script_as(wrapped, original)
            _patched.append((namespace, name, original))
            namespace[name] = wrapped
            done = True
    return done


def _script_as(wrapped: Callable[..., Any], original: Callable[..., Any]) -> None:
    """TorchScript compiles ``wrapped`` as the builtin ``original`` is: a function a model
    scripts as it is imported during the trace (GPTBigCode's ``@torch.jit.script`` softmax)
    calls F.softmax, whose body calls the check; it cannot compile the Python wrapper."""
    from torch.jit import _builtins

    op = _builtins._find_builtin(original)
    if op is not None:
        _builtins._register_builtin(wrapped, op)


def _unscript(wrapped: Callable[..., Any]) -> None:
    """Take ``wrapped`` out of TorchScript's builtins again (its table is keyed by id)."""
    from torch.jit import _builtins

    _builtins._get_builtin_table().pop(id(wrapped), None)


@contextmanager
def python_function_reentry() -> Iterator[None]:
    """Let the mode re-enter Python-level torch functions once, to see the builtins inside.

    Such functions start with ``if has_torch_function(...)``; while this is active, that check
    answers False once right after the mode has seen the call, so the body runs with the mode
    on. Modules are patched as their functions are first met, and restored on exit.
    """
    global _patching
    _patching = True
    for module in (F, torch.functional, torch.overrides, torch.nn.init, torch._tensor):
        _patch_globals(vars(module))
    try:
        yield
    finally:
        _patching = False
        while _patched:
            namespace, name, original = _patched.pop()
            _unscript(namespace[name])
            namespace[name] = original
        _local.skip_check = False
        _local.reentering = None
