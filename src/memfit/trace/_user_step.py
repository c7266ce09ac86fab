"""What a trace needs to see inside a user's own step function (``step_fn``).

memfit's own loop tells the trace where the forward, backward and optimizer phases begin; a
user's step does all three itself, possibly several times (gradient accumulation, a GAN's two
optimizers). So, while such a step runs, the trace watches autograd and torch.optim instead:

* entering ``torch.autograd.backward`` (``loss.backward()`` and ``scaler.scale(loss).backward()``
  go through it) starts a backward phase, which marks what the forward saved as activations;
  leaving it marks the gradients and starts a forward phase again (the next micro-batch);
* torch.optim's global step hooks mark each optimizer's state and its phase.

The user's ``torch.autocast("cuda", ...)`` and ``torch.amp.GradScaler("cuda")`` must act as on a
GPU although this machine may have none: autocast's class is made to run memfit's emulation for
CUDA (also when the user imported it by name before the trace), and GradScaler is told that
CUDA's amp is available, so it scales, unscales and checks for infs as it does on a GPU. A
scaler the user keeps between calls (a module-level ``GradScaler``) is left as it was found: its
scale, growth tracker and per-optimizer state are put back after the trace, so that no meta tensor
of memfit's stays in the user's object.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any

import torch

from memfit.trace import _autocast

__all__ = ["StepWatch", "amp_as_on_cuda"]

_AUTOCAST = torch.amp.autocast_mode.autocast
_EMULATED = ("cuda", "meta")


class StepWatch:
    """Phases, gradients and optimizer state inside a user's step (see the module's doc)."""

    def __init__(
        self,
        phase: Callable[[str], None],
        current_phase: Callable[[], str],
        mark_grads: Callable[[], None],
        mark_optimizer: Callable[[Any], None],
    ) -> None:
        self._phase = phase
        self._current = current_phase
        self._mark_grads = mark_grads
        self._mark_optimizer = mark_optimizer
        self.backward_calls = 0
        self.optimizer_steps = 0

    def _step_phase(self, name: str) -> None:
        self._phase(f"{self._current().partition('.')[0]}.{name}")

    @contextmanager
    def active(self) -> Iterator[None]:
        original = torch.autograd.backward

        depth = [0]

        # a wrapper torch's override dispatch can see through (``__wrapped__``): the trace's
        # function mode then re-enters the original with itself on, so the whole backward
        # (checkpointed blocks recomputed in it included) runs as on the target GPU
        @functools.wraps(original)
        def backward(*args: Any, **kwargs: Any) -> Any:
            # the trace's function mode re-enters torch functions: the outermost call counts
            depth[0] += 1
            if depth[0] > 1:
                try:
                    return original(*args, **kwargs)
                finally:
                    depth[0] -= 1
            self.backward_calls += 1
            self._step_phase("backward")
            try:
                out = original(*args, **kwargs)
            finally:
                depth[0] -= 1
            # after a failure the phase stays the backward's, which the error names
            self._mark_grads()
            self._step_phase("forward")
            return out

        def before_step(optimizer: Any, args: Any, kwargs: Any) -> None:
            self._step_phase("optimizer")

        def after_step(optimizer: Any, args: Any, kwargs: Any) -> None:
            self.optimizer_steps += 1
            self._mark_optimizer(optimizer)
            self._step_phase("forward")

        optim: Any = importlib.import_module("torch.optim.optimizer")
        pre = optim.register_optimizer_step_pre_hook(before_step)
        post = optim.register_optimizer_step_post_hook(after_step)
        torch.autograd.backward = backward
        try:
            yield
        finally:
            torch.autograd.backward = original
            pre.remove()
            post.remove()


@contextmanager
def amp_as_on_cuda(seen: set[str] | None = None) -> Iterator[None]:
    """``torch.autocast`` for CUDA runs memfit's emulation (whatever name it was imported
    by), and GradScaler("cuda") stays enabled on a machine without CUDA. What the user's code
    entered (``autocast bfloat16``...) is added to ``seen``."""
    saved = {name: _AUTOCAST.__dict__[name] for name in ("__init__", "__enter__", "__exit__")}
    amp_common: Any = torch.cuda.amp.common
    not_available = amp_common.amp_definitely_not_available

    class Seen(_autocast.EmulatedAutocast):
        """The emulation, noting its dtype: ``torch.autocast`` itself during the trace, and
        what an alias of the real class (``from torch import autocast``) runs."""

        def __init__(
            self,
            device_type: str = "cuda",
            dtype: torch.dtype | None = None,
            enabled: bool = True,
            cache_enabled: bool | None = None,
        ) -> None:
            super().__init__(device_type, dtype, enabled, cache_enabled)
            if seen is not None and enabled and device_type in _EMULATED:
                seen.add(str(dtype or torch.float16).removeprefix("torch."))

    init, enter, exit = _alias_methods(saved, Seen)
    patched: Any = _AUTOCAST
    patched.__init__, patched.__enter__, patched.__exit__ = init, enter, exit
    amp_common.amp_definitely_not_available = lambda: False
    names = (torch, "autocast"), (torch.amp, "autocast")
    before = [getattr(space, name) for space, name in names]
    for space, name in names:
        setattr(space, name, Seen)
    try:
        with _scalers_left_as_found():
            yield
    finally:
        for name, fn in saved.items():
            setattr(_AUTOCAST, name, fn)
        amp_common.amp_definitely_not_available = not_available
        for (space, name), value in zip(names, before, strict=True):
            setattr(space, name, value)


def _alias_methods(saved: dict[str, Any], emulation: type[Any]) -> tuple[Any, Any, Any]:
    """``__init__``, ``__enter__`` and ``__exit__`` for torch's autocast class: CUDA (and meta)
    regions run ``emulation``; other devices run the class's own ``saved`` methods."""

    def init(
        self: Any,
        device_type: str = "cuda",
        dtype: torch.dtype | None = None,
        enabled: bool = True,
        cache_enabled: bool | None = None,
    ) -> None:
        if device_type in _EMULATED:
            self._memfit = emulation(device_type, dtype, enabled, cache_enabled)
            self.device = device_type
            return
        self._memfit = None
        saved["__init__"](self, device_type, dtype, enabled, cache_enabled)

    def enter(self: Any) -> Any:
        emulated = getattr(self, "_memfit", None)
        if emulated is None:
            return saved["__enter__"](self)
        emulated.__enter__()
        return self

    def exit(
        self: Any,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Any:
        emulated = getattr(self, "_memfit", None)
        if emulated is None:
            return saved["__exit__"](self, exc_type, exc, tb)
        return emulated.__exit__(exc_type, exc, tb)

    return init, enter, exit


_SCALER_STATE = ("_scale", "_growth_tracker", "_per_optimizer_states")


@contextmanager
def _scalers_left_as_found() -> Iterator[None]:
    """Every GradScaler the step uses gets back, after the trace, the state it had before: its
    scale and growth tracker (created on the trace's meta device otherwise) and the
    per-optimizer records. A scale it already held (on a GPU) is used as a meta copy."""
    scaler_class: Any = torch.amp.GradScaler
    names = ("scale", "unscale_", "step", "update")
    saved = {name: scaler_class.__dict__[name] for name in names}
    found: dict[int, tuple[Any, dict[str, Any]]] = {}

    def adopt(scaler: Any) -> None:
        if id(scaler) in found or not scaler.__dict__.get("_enabled", False):
            return
        state = {key: scaler.__dict__.get(key) for key in _SCALER_STATE}
        found[id(scaler)] = scaler, state
        records = state["_per_optimizer_states"]
        if records is not None:
            scaler._per_optimizer_states = type(records)(records.default_factory)
        for key in ("_scale", "_growth_tracker"):
            value = state[key]
            if isinstance(value, torch.Tensor) and value.device.type != "meta":
                setattr(scaler, key, value.to("meta"))

    def watched(fn: Callable[..., Any]) -> Callable[..., Any]:
        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            adopt(self)
            return fn(self, *args, **kwargs)

        return method

    for name, fn in saved.items():
        setattr(scaler_class, name, watched(fn))
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(scaler_class, name, fn)
        for scaler, state in found.values():
            for key, value in state.items():
                setattr(scaler, key, value)
