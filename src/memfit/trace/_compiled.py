"""``torch.compile`` met while the step is traced: a model compiled as a whole handed to the
compiled path (captured first, :class:`CaptureNeeded`, then replayed), refused, or run eagerly
under ``compiled="eager"`` (with the note that says so). Nothing is compiled in the trace itself.

What the user gave is checked before any work (``memfit.workload``'s ``compiled_as_eager``); what
is only met while the step runs is caught here:

- ``torch.compile(...)`` / ``torch._dynamo.optimize(...)`` called in a model factory, a
  ``forward`` or a step function (``module.compile()`` calls ``torch.compile`` too): refused at
  the call, or the identity (the uncompiled module or function) under ``compiled="eager"``;
  ``torch.compile(model)`` in a factory with inductor's defaults wraps the model for real, so
  that the model the factory returns is compiled as a whole;
- a model factory that returns a compiled model (:meth:`CompileGuard.checked_model`): a whole
  model with inductor's defaults is replayed from its plan, other forms are refused;
- anything compiled before the trace and called in it (a compiled helper held by a closure):
  dynamo's entry (``_callback_from_stance``, the hook ``torch.compiler.set_stance`` works
  through) answers "run eagerly", as ``set_stance("force_eager")`` does; the call is recorded
  and refused when the trace ends (raising inside dynamo's entry would leave its state half
  set), or noted under ``compiled="eager"``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from memfit._errors import MemfitError
from memfit.technique.compilation import (
    COMPILED_NOTE,
    compiled_function,
    compiled_parts,
    compiled_refusal,
    eager_view,
    not_compiled_refusal,
    whole_model_compiled,
)
from memfit.trace._compiled_capture import CompiledPlan
from memfit.trace._compiled_replay import CompiledReplay
from memfit.workload import Workload

__all__ = ["CaptureNeeded", "CompileGuard"]


class CaptureNeeded(MemfitError):
    """The model is compiled as a whole: its compiled step must be captured (outside the
    trace, :func:`memfit.trace._compiled_capture.capture_compiled`) and the trace run again
    with the plan."""


class CompileGuard:
    """The compile patches of one trace; ``seen`` holds what was compiled, in words. With a
    ``plan``, a model compiled as a whole is replayed as inductor compiles it."""

    def __init__(
        self,
        workload: Workload,
        phase: Callable[[], str],
        plan: CompiledPlan | None = None,
    ) -> None:
        self.plan = plan
        self.replays = workload.compiled is None
        self.eager = workload.compiled == "eager"
        self.checked_before = COMPILED_NOTE in workload.notes  # found by make_workload
        self.name = workload.name
        self.phase = lambda: _phase_words(phase())
        self.seen: list[str] = []
        # a workload's own functions (a file's step, a recipe's forward), before the trace
        for what in ("step_fn", "loss_fn", "forward_fn"):
            fn = getattr(workload, what, None)
            if fn is not None and compiled_function(fn):
                inner = getattr(fn, "_torchdynamo_orig_callable", fn)
                self._met(
                    f"{what}={getattr(inner, '__name__', what)} is compiled with torch.compile"
                )

    @contextmanager
    def active(self) -> Iterator[None]:
        """Patch ``torch.compile``, ``torch._dynamo.optimize`` and dynamo's entry while the
        trace runs; restore them on exit."""
        saved: list[tuple[Any, str, Any]] = [(torch, "compile", torch.compile)]
        dynamo: Any = sys.modules.get("torch._dynamo")
        if dynamo is not None and hasattr(dynamo, "optimize"):
            saved.append((dynamo, "optimize", dynamo.optimize))
        eval_frame = sys.modules.get("torch._dynamo.eval_frame")
        entry = getattr(eval_frame, "_callback_from_stance", None)
        if entry is not None:
            saved.append((eval_frame, "_callback_from_stance", entry))
        self._original: Any = torch.compile
        self._original_optimize: Any = getattr(dynamo, "optimize", None)
        self._wrapping = False
        torch.compile = self._compile  # type: ignore[assignment]
        if dynamo is not None and hasattr(dynamo, "optimize"):
            dynamo.optimize = self._optimize
        if entry is not None:
            eval_frame._callback_from_stance = self._run_eagerly(entry)  # type: ignore[union-attr]
        try:
            yield
        finally:
            for owner, name, value in saved:
                setattr(owner, name, value)

    def _compile(self, model: Any = None, **kwargs: Any) -> Any:
        """``torch.compile`` in the trace: refused, or the identity under ``compiled="eager"``
        (also as a decorator, ``torch.compile(mode=...)(fn)``)."""
        if model is None:
            return lambda fn: self._compile(fn, **kwargs)
        if kwargs.get("disable"):
            return model  # torch.compile(..., disable=True) compiles nothing
        setup = self.phase().startswith("setup")
        if self.replays and isinstance(model, nn.Module) and setup and _default_compile(kwargs):
            # a factory compiling its model as a whole: wrapped for real, captured, replayed
            self._wrapping = True
            try:
                return self._original(model, **kwargs)
            finally:
                self._wrapping = False
        self._met(f"torch.compile was called on {_describe(model)} during {self.phase()}")
        return model

    def _optimize(self, *args: Any, **kwargs: Any) -> Any:
        """``torch._dynamo.optimize(backend)`` in the trace: its decorator is the identity
        (dynamo's own when ``torch.compile`` wraps a model to be replayed)."""
        if self._wrapping and self._original_optimize is not None:
            return self._original_optimize(*args, **kwargs)
        self._met(f"torch._dynamo.optimize was called during {self.phase()}")
        return lambda fn: fn

    def _met(self, what: str) -> None:
        if not self.eager:
            raise compiled_refusal(what)
        self.seen.append(what)

    def _run_eagerly(self, entry: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """Dynamo's entry, answering "run eagerly" (``set_stance("force_eager")``) for any
        compiled function or module that is called."""

        def callback_from_stance(callback: Any) -> Any:
            if callback is None or callback is False:
                return entry(callback)
            self.seen.append(
                "a function or module compiled with torch.compile before the trace was called "
                f"during {self.phase()}"
            )
            return None

        return callback_from_stance

    def checked_model(self, model: nn.Module) -> nn.Module:
        """The model a factory built: refused if compiled; its eager view under
        ``compiled="eager"`` (what the factory returned is not modified)."""
        parts = compiled_parts(model)
        if not parts:
            return model
        if self.replays and whole_model_compiled(model, parts):
            if self.plan is None:
                raise CaptureNeeded("the compiled model's step is captured first")
            return CompiledReplay(eager_view(model), self.plan)
        self._met("the model factory returned a compiled model: " + "; ".join(parts))
        return eager_view(model)

    def finish(self) -> list[str]:
        """After the trace: refuse what was compiled and only met running, or the note under
        ``compiled="eager"``; a ``compiled="eager"`` that found nothing compiled is refused."""
        if self.seen and not self.eager:
            raise compiled_refusal(self.seen[0])
        if self.eager and not self.seen and not self.checked_before:
            raise not_compiled_refusal(f"the model {self.name} (nor anything its step calls)")
        return [COMPILED_NOTE] if self.seen and not self.checked_before else []


def _default_compile(kwargs: dict[str, Any]) -> bool:
    """``torch.compile``'s settings are those a compiled estimate takes: inductor, its default
    mode, no options (``max-autotune`` and CUDA graphs allocate otherwise)."""
    return (
        kwargs.get("backend", "inductor") == "inductor"
        and kwargs.get("mode") in (None, "default")
        and not kwargs.get("options")
    )


def _phase_words(phase: str) -> str:
    return "setup (while the model was built)" if phase == "setup" else phase


def _describe(obj: Any) -> str:
    """``obj`` given to ``torch.compile``, in words."""
    owner = getattr(obj, "__self__", None)
    if isinstance(owner, nn.Module) and getattr(obj, "__name__", "") == "_call_impl":
        return f"the module {type(owner).__name__} (by {type(owner).__name__}.compile())"
    if isinstance(obj, nn.Module):
        return f"the module {type(obj).__name__}"
    name = getattr(obj, "__name__", None)
    return f"the function {name}" if name else f"a {type(obj).__name__}"
