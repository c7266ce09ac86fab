"""Why a trace failed, in one paragraph that names the real cause.

A trace runs the user's code (their model, batch and loss_fn) on meta tensors. When it fails,
the error says where (the op, the module, the phase), whose code was running (the innermost
frame that is neither torch, memfit nor the standard library) and then the exception's own
message. Causes that are common and recognisable (a ``None`` batch, a batch that does not match
``forward``'s parameters, a ``loss_fn`` returning a float or a non-scalar) get their own
sentence (a ``loss_fn`` of the wrong arity is refused earlier, by ``Workload``); the
custom-kernel hint is added only when the failing op is not one of torch's and has no fake
(meta) kernel, and an op is named only when the exception is the one that op raised.
Checks here never run an op, so what is traced does not change.
"""

from __future__ import annotations

import inspect
import os
import re
import sysconfig
import traceback
from collections.abc import Callable
from types import TracebackType
from typing import Any

import torch
from torch import nn

from memfit._errors import InvalidInputError, MemfitError, TraceError, UserCodeError

__all__ = ["check_batch", "checked_loss", "describe_batch", "trace_error"]

_TORCH_DIR = os.path.dirname(os.path.realpath(torch.__file__)) + os.sep
_MEMFIT_DIR = os.path.dirname(os.path.dirname(os.path.realpath(__file__))) + os.sep
_STDLIB_DIRS = tuple(
    os.path.realpath(sysconfig.get_paths()[key]) + os.sep for key in ("stdlib", "platstdlib")
)
_OWN_OPS = ("aten::", "prims::", "prim::", "_c10d_functional::", "c10d::")
# torch's words when an op has no kernel for meta tensors (torch 2.11-2.14)
_NO_KERNEL = "no fake impl or Meta kernel registered"
_FORWARD_MISMATCH = re.compile(
    r"(\w[\w.<>]*)\.forward\(\) (got an unexpected keyword|missing \d+ required|"
    r"takes \d+ positional|got multiple values)"
)


def checked_loss(loss_fn: Callable[..., Any]) -> Callable[[nn.Module, Any], torch.Tensor]:
    """``loss_fn`` that refuses, with the value, a result backward cannot run on."""

    def loss(model: nn.Module, batch: Any) -> torch.Tensor:
        result = loss_fn(model, batch)
        with torch._C.DisableTorchFunction():  # metadata only; nothing reaches the trace
            problem = _loss_problem(result)
        if problem is not None:
            raise InvalidInputError(
                f"loss_fn returned {problem}: return a scalar tensor that depends on the "
                "model's output (e.g. the loss itself, not loss.item(); .sum() or .mean() of "
                "a per-sample loss), so memfit can run backward on it."
            )
        return result  # type: ignore[no-any-return]

    return loss


def _loss_problem(result: Any) -> str | None:
    if not isinstance(result, torch.Tensor):
        return f"{type(result).__name__} {_short(result)}"
    if result.dim() != 0:
        return f"a tensor of shape {tuple(result.shape)}, not a scalar"
    if not result.requires_grad:
        return "a tensor that does not require grad (it is not computed from the parameters)"
    return None


def check_batch(batch: Any) -> None:
    """Refuse a ``None`` batch before the model is called with it."""
    if batch is None:
        raise InvalidInputError(
            "The batch is None: make_batch (or batch=) returned None. Return a tensor, a "
            "tuple of tensors (passed as model(*batch)) or a dict (passed as model(**batch))."
        )


def describe_batch(batch: Any) -> str:
    """The batch's shape of call, kept instead of the batch (holding it would change frees)."""
    with torch._C.DisableTorchFunction():  # metadata only; nothing reaches the trace
        return _describe(batch)


def _describe(batch: Any) -> str:
    if isinstance(batch, dict):
        return f"a dict with keys {sorted(map(str, batch))} (called as model(**batch))"
    if isinstance(batch, (tuple, list)):
        return f"a {type(batch).__name__} of {len(batch)} (called as model(*batch))"
    if isinstance(batch, torch.Tensor):
        return f"a tensor of shape {tuple(batch.shape)} (called as model(batch))"
    return f"a {type(batch).__name__} (called as model(batch))"


def trace_error(
    exc: BaseException,
    phase: str,
    failure: tuple[str, str] | None,
    module: str | None,
    model: nn.Module | None,
    batch: str | None,
) -> MemfitError:
    """One paragraph for a failed trace: the cause, where, whose code, the exception's text."""
    failure = failure if _raised_by_op(exc, failure) else None
    text = _first_line(exc)
    frame = user_frame(exc.__traceback__)
    at = f" Called from {frame}." if frame else ""
    if isinstance(exc, TypeError) and failure is None:
        match = _FORWARD_MISMATCH.search(str(exc))
        if match is not None and batch is not None:
            params = _forward_params(model) if model is not None else ""
            return InvalidInputError(
                f"The batch does not match the model's forward during {phase}: {text} "
                f"The batch is {batch}; {match.group(1)}.forward's parameters are "
                f"{params or 'different'}. Make the batch's keys (or length) match them, "
                "or call the model yourself: loss_fn=lambda model, batch: ... (training) or "
                "step_fn=lambda model, batch: model(batch[0]) (inference, e.g. a batch of "
                "inputs and labels)."
            )
    if failure is None and frame and _raised_in_user_code(exc.__traceback__):
        return UserCodeError(
            f"Your code raised {type(exc).__name__} during {phase} (at {frame}): {text} "
            "This is an error in the model, batch, loss_fn or step_fn given to memfit, not "
            "in memfit; "
            "it would fail the same way on a GPU.",
            location=_location(exc.__traceback__),
        )
    op, where = failure or ("", module or "")
    if op and _lacks_kernel(op, exc):
        return _no_shape(op, phase, where, model, frame)
    place = f"op {op} in {where or 'the model'}" if op else where or "the step"
    fed = f" The batch was {batch}." if batch is not None and phase.endswith(".forward") else ""
    return TraceError(
        f"The step could not run on memfit's meta tensors: {place} failed during "
        f"{phase}.{at} {type(exc).__name__}: {text}{fed}{_hint(op, exc)}",
        op=op or None,
        module=where or None,
    )


def _raised_by_op(exc: BaseException, failure: tuple[str, str] | None) -> bool:
    """Whether ``exc`` is (or was raised from) the exception of the op the recorder saw fail:
    the model may have caught that one and failed later for a reason of its own, and then
    naming the op, and its hints, would be about something else."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while failure is not None and current is not None and id(current) not in seen:
        if getattr(current, "memfit_failed_op", None) is failure:
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _has_fake_kernel(op: str) -> bool:
    """Whether ``op`` (``namespace::name[.overload]``) runs on meta tensors: a Meta kernel
    (``torch.library.register_fake`` registers one) or a composite one that serves every
    device. A ``torch.library.custom_op`` always has a Meta kernel, which refuses unless a
    fake was registered, so for one of those the registration decides. False for a name the
    dispatcher does not know."""
    custom = getattr(torch._library.custom_ops, "OPDEFS", {}).get(op.partition(".")[0])
    if custom is not None:
        return getattr(custom, "_abstract_fn", None) is not None
    try:
        return any(
            torch._C._dispatch_has_kernel_for_dispatch_key(op, key)
            for key in ("Meta", "CompositeExplicitAutograd", "CompositeImplicitAutograd")
        )
    except RuntimeError:
        return False


def _lacks_kernel(op: str, exc: BaseException) -> bool:
    """Whether ``op`` failed for want of a meta (fake) kernel: one of torch's own ops that
    raised torch's words for that (a Python meta registration does not show in the
    dispatcher, so its absence there proves nothing), or an op outside torch that has none."""
    if "::" not in op:
        return False
    if op.startswith(_OWN_OPS):
        return isinstance(exc, NotImplementedError) and _NO_KERNEL in str(exc)
    return not _has_fake_kernel(op)


def _no_shape(op: str, phase: str, where: str, model: nn.Module | None, frame: str) -> TraceError:
    """The refusal of an op memfit cannot shape: the op, the model, the phase, and the fix."""
    name = type(model).__name__ if model is not None else "the model"
    module = where.removesuffix(" (backward)")
    context = [f"module {module}"] if module and module != name else []
    context += [f"called from {frame}"] if frame else []
    within = f" ({'; '.join(context)})" if context else ""
    if op.startswith(_OWN_OPS):
        fix = (
            f'register one before calling memfit, torch.library.register_fake("{op}") on a '
            "function that returns empty tensors of the outputs' shapes and dtypes (memory "
            "the CUDA kernel takes beyond its outputs is then not counted), or use a path of "
            "the model that avoids the op."
        )
    else:
        fix = (
            "give this op from a custom CUDA extension a fake (meta) implementation, registered "
            "with torch.library.register_fake before calling memfit, or use the model's "
            "pure-PyTorch path (e.g. attn_implementation='sdpa')."
        )
    return TraceError(
        f"memfit has no shape for {op}, called in {_phase_words(phase, name)}{within}: the op "
        f"has no meta (fake) kernel, neither in PyTorch {torch.__version__} nor in memfit, so "
        f"the step cannot run on meta tensors. To estimate {name}, {fix}",
        op=op,
        module=where or None,
    )


def _phase_words(phase: str, name: str) -> str:
    """``step1.backward`` as ``Bert's backward of step 1``; other phases by what they are."""
    step, _, part = phase.partition(".")
    words = {
        "forward": "forward",
        "backward": "backward",
        "optimizer": "optimizer step",
        "zero_grad": "zero_grad",
        "input": "batch moving to the GPU",
    }
    if step.startswith("step") and part in words:
        return f"{name}'s {words[part]} of step {step.removeprefix('step')}"
    return f"{name}'s build" if phase == "setup" else f"{name}'s {phase}"


def _hint(op: str, exc: BaseException) -> str:
    """The custom-kernel hint, only where it applies: the failing op is not one of torch's
    own (a name with a namespace outside torch's) and has no fake (meta) kernel. An op that
    has one failed for another reason, which the exception's text says."""
    if not op or "::" not in op or op.startswith(_OWN_OPS) or _has_fake_kernel(op):
        return ""
    return (
        f" {op} is not a PyTorch op: an op from a custom CUDA extension needs a fake (meta) "
        "implementation, registered with torch.library.register_fake, or use the model's "
        "pure-PyTorch path (e.g. attn_implementation='sdpa')."
    )


def user_frame(tb: TracebackType | None) -> str:
    """The innermost frame outside torch, memfit and the standard library, as ``file:line``.

    Another library's frame (e.g. transformers) is named by the library: ``transformers
    (models/gpt2/modeling_gpt2.py:123, forward)``.
    """
    for summary in reversed(traceback.extract_tb(tb)):
        path = os.path.realpath(summary.filename)
        if _is_internal(path):
            continue
        library = _library_of(path)
        if library is not None:
            package, rest = library
            return f"{package} ({rest}:{summary.lineno}, {summary.name})"
        return f"{summary.filename}:{summary.lineno}, in {summary.name}"
    return ""


def _raised_in_user_code(tb: TracebackType | None) -> bool:
    """The innermost frame (where the exception was raised) is the user's own file."""
    frames = traceback.extract_tb(tb)
    if not frames:
        return False
    path = os.path.realpath(frames[-1].filename)
    return not _is_internal(path) and _library_of(path) is None


def _location(tb: TracebackType | None) -> str | None:
    frames = traceback.extract_tb(tb)
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else None


def _is_internal(path: str) -> bool:
    if path.startswith((_TORCH_DIR, _MEMFIT_DIR)) or path.startswith("<"):
        return True
    in_stdlib = path.startswith(_STDLIB_DIRS)
    return in_stdlib and "site-packages" not in path and "dist-packages" not in path


def _library_of(path: str) -> tuple[str, str] | None:
    """(package, path inside it) for a file under site-packages, else None."""
    for marker in ("site-packages" + os.sep, "dist-packages" + os.sep):
        if marker in path:
            inside = path.split(marker, 1)[1]
            package, _, rest = inside.partition(os.sep)
            return package, rest or package
    return None


def _forward_params(model: nn.Module) -> str:
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return ""
    return "(" + ", ".join(params) + ")"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    if isinstance(exc, KeyError) and exc.args:
        text = f"key {exc.args[0]!r} not found"
    line = text.splitlines()[0] if text else type(exc).__name__
    return line if line.endswith((".", "!", "?", ":")) else line + "."


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
