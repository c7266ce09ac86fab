"""``InjectOOM``: make a model run out of memory on purpose, on any device, for tests.

A training loop guarded by :class:`memfit.AutoMicrobatch` should be tested where it matters, in
CI on a CPU. ``InjectOOM`` raises the same ``torch.OutOfMemoryError`` CUDA raises, where a real
GPU would: in the forward or the backward pass of a model called with more than ``max_samples``
samples (or on chosen calls), and in chosen optimizer steps. Hooks only: the model is unchanged
once the injector is removed (``remove()`` or the end of its ``with`` block).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from types import TracebackType
from typing import Any, Literal

import torch
from torch.utils.hooks import RemovableHandle

from memfit._errors import InvalidInputError
from memfit.runtime._split import batch_size

__all__ = ["InjectOOM"]


def _oom(what: str) -> torch.OutOfMemoryError:
    return torch.OutOfMemoryError(
        f"CUDA out of memory. Tried to allocate {what} (simulated by memfit.runtime.InjectOOM)"
    )


class _RaiseInBackward(torch.autograd.Function):
    """Identity in the forward pass; raises ``torch.OutOfMemoryError`` in the backward pass."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, what: str) -> torch.Tensor:
        ctx.what = what
        return x.clone()  # a view would forbid in-place changes of the output

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        raise _oom(ctx.what)


def _wrap_outputs(out: Any, what: str) -> Any:
    """Route every top-level output tensor that needs a gradient through the raising node."""

    def wrap(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.requires_grad:
            return _RaiseInBackward.apply(value, what)
        return value

    if isinstance(out, torch.Tensor):
        return wrap(out)
    if isinstance(out, Mapping):
        for key in list(out.keys()):
            out[key] = wrap(out[key])  # type: ignore[index]
        return out
    if isinstance(out, (tuple, list)):
        return type(out)(wrap(v) for v in out)
    return out


def _check_arguments(
    model: Any, max_samples: Any, calls: Any, optimizer: Any, optimizer_steps: Any
) -> None:
    """Refuse what would make the injector never fire, or fail at the first call."""
    if not isinstance(model, torch.nn.Module):
        raise InvalidInputError(
            f"InjectOOM needs the torch.nn.Module to fail, not a {type(model).__name__}: "
            "InjectOOM(model, max_samples=...)."
        )
    if max_samples is not None and (type(max_samples) is not int or max_samples < 0):
        raise InvalidInputError(
            f"max_samples={max_samples!r} is not accepted; give a whole number >= 0 (calls with "
            "more samples than this fail), or None."
        )
    _check_counts("calls", calls, "the model's forward calls")
    _check_counts("optimizer_steps", optimizer_steps, "optimizer.step() calls")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise InvalidInputError(
            f"optimizer={optimizer!r} is not a torch.optim.Optimizer: pass the optimizer "
            "whose steps should fail, e.g. optimizer=torch.optim.SGD(model.parameters(), ...)."
        )
    if optimizer_steps and optimizer is None:
        raise InvalidInputError("optimizer_steps needs the optimizer: give optimizer=...")


def _check_counts(name: str, values: Any, counted: str) -> None:
    """Calls are counted from 1 (the first call is 1); 0 or less would never fire."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Collection):
        raise InvalidInputError(
            f"{name}={values!r} is not a collection of call numbers; give e.g. {name}=[1, 3] "
            f"({counted} are counted from 1)."
        )
    bad = [v for v in values if type(v) is not int or v < 1]
    if bad:
        raise InvalidInputError(
            f"{name} contains {bad[0]!r}, which never fires: {counted} are counted from 1 (the "
            f"first is 1), so give whole numbers >= 1, e.g. {name}=[1]."
        )


class InjectOOM:
    """Raise ``torch.OutOfMemoryError`` in ``model``'s forward or backward, or the optimizer.

    ``max_samples``: fail every call with more samples than this (the dim-0 size of its tensor
    arguments). ``calls``: also fail these calls of the model's forward (1 for the first).
    ``phase``: raise in the ``"forward"`` pass (before the model runs) or the ``"backward"``
    pass (when the gradient reaches the model's outputs). ``optimizer_steps``: fail these calls
    of ``optimizer.step()`` (1 for the first). ``raised`` lists what was raised, in order.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        max_samples: int | None = None,
        calls: Collection[int] = (),
        phase: Literal["forward", "backward"] = "forward",
        optimizer: torch.optim.Optimizer | None = None,
        optimizer_steps: Collection[int] = (),
    ) -> None:
        if phase not in ("forward", "backward"):
            raise InvalidInputError(
                f"phase={phase!r} is not accepted; give 'forward' or 'backward'."
            )
        _check_arguments(model, max_samples, calls, optimizer, optimizer_steps)
        self.max_samples = max_samples
        self.calls = set(calls)
        self.phase = phase
        self.optimizer_steps = set(optimizer_steps)
        self.forward_calls = 0
        self.optimizer_calls = 0
        self.raised: list[str] = []
        self._handles: list[RemovableHandle] = [
            model.register_forward_pre_hook(self._pre_forward, with_kwargs=True),
            model.register_forward_hook(self._post_forward, with_kwargs=True),
        ]
        if optimizer is not None:
            self._handles.append(optimizer.register_step_pre_hook(self._pre_step))
        self._pending: str | None = None

    def _pre_forward(self, module: torch.nn.Module, args: Any, kwargs: Any) -> None:
        self.forward_calls += 1
        n = batch_size((args, kwargs))
        self._pending = None
        if self.forward_calls in self.calls:
            reason = f"call {self.forward_calls}"
        elif self.max_samples is not None and n > self.max_samples:
            reason = f"{n} samples, more than {self.max_samples}"
        else:
            return
        what = f"the activations of {reason}"
        if self.phase == "forward":
            self.raised.append(f"forward: {reason}")
            raise _oom(what)
        self._pending = what

    def _post_forward(self, module: torch.nn.Module, args: Any, kwargs: Any, out: Any) -> Any:
        what, self._pending = self._pending, None
        if what is None or not torch.is_grad_enabled():
            return None
        self.raised.append(f"backward: {what.removeprefix('the activations of ')}")
        return _wrap_outputs(out, what)

    def _pre_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.optimizer_calls += 1
        if self.optimizer_calls in self.optimizer_steps:
            self.raised.append(f"optimizer: step {self.optimizer_calls}")
            raise _oom(f"the optimizer state of step {self.optimizer_calls}")

    def remove(self) -> None:
        """Remove the hooks: the model and optimizer behave as before."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def __enter__(self) -> InjectOOM:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.remove()
