"""Models and functions compiled with ``torch.compile``: found before any work, passed on to the
compiled trace, refused, or estimated as their eager (uncompiled) step when the user asks for it
with ``compiled="eager"``.

A model compiled as a whole with inductor's defaults (:func:`whole_model_compiled`) is estimated
as inductor compiles it (``memfit.trace``'s compiled path). Other compiled forms are refused
(:func:`compiled_refusal`), or, under ``compiled="eager"``, estimated as the eager step, usually
above the compiled one (not always), with :data:`COMPILED_NOTE` on the estimate. Never the eager
step silently.

The forms found here, on what the user gives: a ``torch.compile(model)`` (an ``OptimizedModule``,
at the top or as a submodule), a module compiled in place (``module.compile()`` sets
``_compiled_call_impl``), and compiled functions (``torch.compile(fn)``) given as settings. What
is compiled while the step runs (in a factory, a ``forward``, a step function) is found by the
trace (``memfit.trace``), with the same message. The user's objects are never modified: the eager
model is a shallow view (:func:`eager_view`) whose parameters are the user's, cloned to meta later
like any module.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from torch import nn

from memfit._choices import COMPILED_CHOICES
from memfit._errors import InvalidInputError, UnsupportedWorkloadError

__all__ = [
    "COMPILED_NOTE",
    "check_compiled_setting",
    "compiled_as_eager",
    "compiled_function",
    "compiled_parts",
    "compiled_refusal",
    "eager_view",
    "not_compiled_refusal",
    "optimized_module_type",
    "whole_model_compiled",
]

COMPILED_NOTE = (
    "the model is compiled with torch.compile; this is the eager step's memory, usually "
    "more than the compiled step takes (not always: a compiled graph may choose other "
    "kernels, e.g. BERT's attention under transformers 5.17)"
)


def check_compiled_setting(value: object) -> None:
    """``compiled=`` is ``None`` (not given) or one of :data:`COMPILED_CHOICES`."""
    if value is None or value in COMPILED_CHOICES:
        return
    raise InvalidInputError(
        f"compiled={value!r} is not a setting memfit knows: give compiled='eager' (on the "
        "command line, --compiled eager) to estimate a torch.compile'd model's uncompiled "
        "step, usually more than it takes; or leave it out for a model that is not compiled."
    )


def compiled_refusal(what: str) -> UnsupportedWorkloadError:
    """The one paragraph for ``what`` is compiled (e.g. "the model is torch.compile(GPT2)")."""
    return UnsupportedWorkloadError(
        f"memfit cannot estimate this compiled step yet: {what}. memfit estimates a model "
        "compiled as a whole by torch.compile with inductor's defaults (no mode, no options), "
        "called by memfit's own step or by a step function: the step as inductor compiles it, "
        "which saves other (usually fewer) activations than the eager step. A compiled "
        "submodule, function, "
        "loss or step function, another backend, or mode='max-autotune' / 'reduce-overhead' "
        "it does not take yet. To estimate the uncompiled model instead, usually more than "
        "the compiled step's memory, pass compiled='eager' (on the "
        "command line: --compiled eager); or estimate the model before torch.compile wraps it."
    )


def not_compiled_refusal(what: str) -> InvalidInputError:
    """``compiled='eager'`` given for a workload where nothing is compiled: it would be
    ignored."""
    return InvalidInputError(
        f"compiled='eager' (--compiled eager) is given, but {what} is not compiled with "
        "torch.compile, so the setting would be ignored: the estimate is the eager step "
        "anyway. Drop compiled='eager' (--compiled)."
    )


def optimized_module_type() -> type[nn.Module] | None:
    """``torch._dynamo``'s ``OptimizedModule``, if dynamo has been imported (a compiled module
    cannot exist before it is; importing it here would cost seconds)."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    found = getattr(eval_frame, "OptimizedModule", None)
    return found if isinstance(found, type) else None


def compiled_function(fn: object) -> bool:
    """``fn`` is a function wrapped by ``torch.compile`` / ``torch._dynamo.optimize``."""
    if isinstance(fn, nn.Module):
        return bool(compiled_parts(fn))
    return callable(fn) and getattr(fn, "_torchdynamo_orig_callable", None) is not None


def _walk(
    module: nn.Module, optimized: type[nn.Module] | None, prefix: str = ""
) -> Iterator[tuple[str, nn.Module]]:
    """Every submodule with its dotted name; not inside an ``OptimizedModule`` (named once, as
    the compiled one)."""
    yield prefix, module
    if optimized is not None and isinstance(module, optimized):
        return
    for name, child in module._modules.items():
        if child is not None:
            yield from _walk(child, optimized, f"{prefix}.{name}" if prefix else name)


def compiled_parts(model: nn.Module) -> list[str]:
    """What is compiled in ``model``, in words ("the model is torch.compile(Net)", "the
    submodule 'blocks.0' (Block) is compiled in place by .compile()"); empty for an eager
    model."""
    optimized = optimized_module_type()
    found: list[str] = []
    for name, module in _walk(model, optimized):
        which = f"the submodule {name!r}" if name else "the model"
        if optimized is not None and isinstance(module, optimized):
            inner = type(getattr(module, "_orig_mod", module)).__name__
            found.append(f"{which} is torch.compile({inner})")
        elif getattr(module, "_compiled_call_impl", None) is not None:
            found.append(f"{which} ({type(module).__name__}) is compiled in place by .compile()")
    return found


def whole_model_compiled(model: Any, found: list[str]) -> bool:
    """``model`` is ``torch.compile(module)`` and nothing else given is compiled: the case a
    compiled estimate takes (the trace captures inductor's step for it)."""
    optimized = optimized_module_type()
    return (
        optimized is not None
        and isinstance(model, optimized)
        and len(found) == 1
        and isinstance(model._orig_mod, nn.Module)
        and not _any_compiled(model._orig_mod, optimized)
        and default_inductor(model)
    )


def default_inductor(model: nn.Module) -> bool:
    """``model`` was compiled by inductor in its default mode with no options (what a compiled
    estimate takes: ``max-autotune`` chooses kernels by timing them, ``reduce-overhead``
    records CUDA graphs with their own memory pool). Where dynamo's wrapper cannot be read, the
    setting is taken as the default."""
    backend: Any = getattr(getattr(model, "dynamo_ctx", None), "callback", None)
    for _ in range(4):  # dynamo wraps the backend a few times
        if backend is None or hasattr(backend, "_compiler_name"):
            break
        backend = getattr(backend, "_torchdynamo_orig_backend", None)
    if backend is None or not hasattr(backend, "_compiler_name"):
        return True
    return backend._compiler_name == "inductor" and not getattr(backend, "config", None)


def eager_view(model: nn.Module) -> nn.Module:
    """``model`` with every ``OptimizedModule`` replaced by the module it wraps and every
    in-place compilation dropped; the user's ``model`` is not modified.

    The modules on the way to a compiled one are shallow copies (their parameters are the
    user's, so the meta clone made later maps them as usual; pickling state drops
    ``_compiled_call_impl``); the rest is shared.
    """
    optimized = optimized_module_type()
    while optimized is not None and isinstance(model, optimized):
        inner = model._orig_mod
        assert isinstance(inner, nn.Module)
        model = inner
    if not _any_compiled(model, optimized):
        return model
    view = copy.copy(model)  # nn.Module's state drops _compiled_call_impl
    view._modules = {
        name: (eager_view(child) if child is not None else None)
        for name, child in model._modules.items()
    }
    return view


def _any_compiled(model: nn.Module, optimized: type[nn.Module] | None) -> bool:
    return any(
        (optimized is not None and isinstance(m, optimized))
        or getattr(m, "_compiled_call_impl", None) is not None
        for m in model.modules()
    )


def compiled_as_eager(
    model: Any, batch: Any, options: Mapping[str, object]
) -> tuple[Any, tuple[str, ...]]:
    """Check what the user gave for compiled parts (before any work): refuse them unless
    ``compiled='eager'``; then return the eager view of the model and the note for the estimate.

    ``compiled='eager'`` where nothing is compiled is refused by the trace, once it has seen the
    whole step (a ``forward`` or a step function may call ``torch.compile``).
    """
    setting = options.get("compiled")
    check_compiled_setting(setting)
    found: list[str] = []
    if isinstance(model, nn.Module):
        found += compiled_parts(model)
    elif callable(model) and compiled_function(model):
        found.append(f"the model factory {_name(model)} is compiled with torch.compile")
    for key in sorted(options):
        value = options[key]
        if callable(value) and not isinstance(value, str) and compiled_function(value):
            found.append(f"{key}={_name(value)} is compiled with torch.compile")
    if callable(batch) and compiled_function(batch):
        found.append(f"the batch factory {_name(batch)} is compiled with torch.compile")
    if setting is None and whole_model_compiled(model, found):
        return model, ()  # the trace captures and replays its compiled step
    if found and setting is None:
        raise compiled_refusal("; ".join(found))
    if not found:
        # a forward or step may still call torch.compile: the trace refuses a
        # compiled='eager' that met nothing compiled
        return model, ()
    eager = eager_view(model) if isinstance(model, nn.Module) else model
    return eager, (COMPILED_NOTE,)


def _name(fn: object) -> str:
    inner = getattr(fn, "_torchdynamo_orig_callable", None) or getattr(fn, "_orig_mod", None)
    named = inner if inner is not None else fn
    text = getattr(named, "__name__", None)
    return str(text) if text else type(named).__name__
