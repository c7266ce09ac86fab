"""The user's own code (a model factory, ``make_batch``, a module imported by path), called so
that what it raises is reported as theirs: their exception, its message and their file's line,
as a :class:`~memfit.UserCodeError` whose ``__cause__`` is the original (``--debug`` shows it).

Errors memfit raises on purpose (:class:`~memfit.MemfitError`) pass through unchanged.
"""

from __future__ import annotations

import inspect
import traceback
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from torch import nn

from memfit._errors import InvalidInputError, MemfitError, UserCodeError

__all__ = ["checked_factory", "code_file", "user_code_error", "wrap_user"]

T = TypeVar("T")


def code_file(fn: object) -> str | None:
    """The file ``fn`` is defined in, where Python can tell (not for a class defined in a
    ``__main__`` without a file: a notebook's, ``python -c``'s)."""
    try:
        return inspect.getsourcefile(fn)  # type: ignore[arg-type]
    except (TypeError, OSError):
        return None


def _location(tb: TracebackType | None, file: str | None) -> str | None:
    """``file.py:line`` of the last frame in ``file`` (else the last frame outside memfit,
    torch and the standard library)."""
    frames = traceback.extract_tb(tb)
    if file is not None:
        mine = [f for f in frames if _same(f.filename, file)]
        if mine:
            return f"{mine[-1].filename}:{mine[-1].lineno}"
    for frame in reversed(frames):
        name = frame.filename.replace("\\", "/")
        if not any(p in name for p in ("/memfit/", "/torch/", "/site-packages/", "<frozen")):
            return f"{frame.filename}:{frame.lineno}"
    return None


def _same(a: str, b: str) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return a == b


def _meta_failure(exc: Exception) -> bool:
    """An op that cannot run on meta tensors, not a bug of the user's."""
    return isinstance(exc, (RuntimeError, NotImplementedError)) and "meta" in str(exc).lower()


def user_code_error(what: str, exc: BaseException, file: str | None) -> UserCodeError:
    """One paragraph for ``exc`` raised by the user's ``what`` (e.g. ``make_model() in
    model.py``): their exception, its message, their line."""
    where = _location(exc.__traceback__, file)
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f"{exc.filename}:{exc.lineno}"
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else "(no message)"
    at = f" at {where}" if where else ""
    return UserCodeError(
        f"Your code raised {type(exc).__name__}{at}, in {what}: {message}. This is an error "
        "in your code, not in memfit: fix it there (run it once without memfit to see it), "
        "then estimate again.",
        where,
    )


def wrap_user(fn: Callable[..., T], what: str) -> Callable[..., T]:
    """``fn`` whose exceptions (other than memfit's own) become a :class:`UserCodeError`."""
    file = code_file(fn)

    def call(*args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        except MemfitError:
            raise
        except Exception as exc:
            if _meta_failure(exc):
                raise  # an op without a meta kernel: the trace names it, with the fix
            raise user_code_error(what, exc, file) from exc

    return call


def checked_factory(factory: Callable[[], Any], what: str) -> Callable[[], nn.Module]:
    """``factory`` whose exceptions are reported as the user's, and whose result must be an
    ``nn.Module`` (a factory returning ``42`` is named, not met later as a missing ``.train``)."""
    call = wrap_user(factory, what)

    def build() -> nn.Module:
        model = call()
        if not isinstance(model, nn.Module):
            raise InvalidInputError(
                f"{what} returned {model!r} ({type(model).__name__}), not a torch.nn.Module: "
                "make it return the model, e.g. 'return MyNet()'."
            )
        return model

    return build
