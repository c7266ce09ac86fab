"""The torch-function layer of a trace: what the GPU would do that meta tensors would not.

It runs above autograd, so what it changes is recorded by autograd like the real thing:

* devices: ``cuda`` in a device argument, ``.to("cuda")`` and ``.cuda()`` become ``meta``;
* autocast: inside an emulated autocast region, inputs are cast per CUDA autocast's op lists;
* attention: ``scaled_dot_product_attention`` runs the kernel the target GPU would pick.

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


class TraceFunctionMode(TorchFunctionMode):
    """Rewrites devices, emulates autocast and picks the attention kernel (see module doc)."""

    def __init__(
        self,
        sm: int,
        on_sdpa: Callable[[str], None] | None = None,
        on_output: Callable[[Any], None] | None = None,
    ) -> None:
        super().__init__()
        self.sm = sm
        self.on_sdpa = on_sdpa
        self.on_output = on_output

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types_: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = dict(kwargs or {})
        if "device" in kwargs:
            kwargs["device"] = _to_meta(kwargs["device"])
        if func in _CUDA_METHODS:
            return args[0].to(_META)
        if func is torch.Tensor.to or func is torch.Tensor.new_empty:
            args = tuple(_to_meta(a) for a in args)
        state = _autocast.current_state()
        if state.enabled:
            policy = _autocast.autocast_policy(func)
            if policy is not None:
                args, kwargs = _autocast.cast_args(policy, args, kwargs, state)
        if func in _DROPOUTS:
            with self:
                out = _fused_dropout(func, args, kwargs)
            if out is not None:
                return out
        if func is _SDPA:
            if state.enabled:
                args, kwargs = _autocast.cast_args("lowp", args, kwargs, state)
            with self:
                out, backend = run_sdpa(args, kwargs, self.sm)
            if self.on_sdpa is not None:
                self.on_sdpa(backend)
            return out
        if isinstance(func, types.FunctionType):
            if getattr(_local, "reentering", None) is func:
                # its has_torch_function check is not one we patched: run it plainly
                _local.reentering = None
                _local.skip_check = False
                return func(*args, **kwargs)
            _local.skip_check = True
            _local.reentering = func
            with self:
                return func(*args, **kwargs)
        out = func(*args, **kwargs)
        if self.on_output is not None:
            self.on_output(out)
        return out


def _skippable(check: Callable[..., bool]) -> Callable[..., bool]:
    def wrapped(*args: Any) -> bool:
        if getattr(_local, "skip_check", False):
            _local.skip_check = False
            _local.reentering = None
            return False
        return check(*args)

    return wrapped


_CHECK_NAMES = ("has_torch_function", "has_torch_function_unary", "has_torch_function_variadic")


@contextmanager
def python_function_reentry() -> Iterator[None]:
    """Let the mode re-enter Python-level torch functions once, to see the builtins inside."""
    modules = [F, torch.functional, torch.nn.modules.activation, torch.overrides, torch.nn.init]
    saved: list[tuple[Any, str, Any]] = []
    for module in modules:
        for name in _CHECK_NAMES:
            if hasattr(module, name):
                saved.append((module, name, getattr(module, name)))
                setattr(module, name, _skippable(getattr(module, name)))
    try:
        yield
    finally:
        for module, name, original in saved:
            setattr(module, name, original)
        _local.skip_check = False
