"""Attributes of a package loaded on first use: the one lazy loader of memfit's packages.

``import memfit`` (and ``memfit.estimator``, ``memfit.planner``...) must not import torch: the
CLI's help, ``memfit watch`` and the renderers start in a fraction of a second. What needs torch
is named in a package's table, attribute to module, and imported when first read; the value is
then kept in the package's namespace, so later reads cost nothing. A package installs it as::

    __getattr__, __dir__ = lazy_attributes(__name__, {"estimate": "_estimate"}, globals())
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(
    package: str,
    names: Mapping[str, str],
    namespace: dict[str, Any],
    guard: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` for the attributes in ``names``: each is
    read from its module (``_name`` a module of ``package``, else a full module name) on
    first use, under ``guard`` (the estimator pauses the garbage collector while torch
    imports), and kept in ``namespace``."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        full = f"{package}.{module}" if module.startswith("_") else module
        with guard():
            value = getattr(importlib.import_module(full), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__
