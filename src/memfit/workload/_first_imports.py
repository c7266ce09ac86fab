"""Modules first imported while memfit builds a model are imported as they would be outside it.

memfit builds a model under ``torch.device("meta")`` (an estimate) or ``"cuda"`` (a
measurement), with its own dispatch modes active. A library imported lazily by the model's
constructor runs its module code there too, so its module-level tensors would be made on that
device and stay so: transformers imports torchaudio while it builds a model, and torchaudio's
``compliance.kaldi.EPSILON`` then became a meta tensor in the user's process after an estimate
(and a 4-byte block on the GPU, never freed, in every measured transformers trace:
benchmarks/results/2026-12-04-h200-plan-proof).
Here each module's code runs with the device context and memfit's modes set aside.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

__all__ = ["imports_outside_modes"]

_inside = threading.local()  # executing a module here: what it imports needs no wrapping


@contextmanager
def imports_outside_modes() -> Iterator[None]:
    """While active, a module imported for the first time executes with no torch function
    mode (a ``torch.device`` context) and no dispatch mode (memfit's recorder) in effect."""
    finder = _Finder()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        if finder in sys.meta_path:  # unless the build's code took it out
            sys.meta_path.remove(finder)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: asks the other finders (not another of its own, active in an
    enclosing build), and wraps the loader they return."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if getattr(_inside, "active", False):
            return None
        for finder in list(sys.meta_path):  # a finder may take itself out as it finds
            if isinstance(finder, _Finder) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is None:
                continue
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _Loader(spec.loader)
            return spec
        return None


class _Loader(importlib.abc.Loader):
    """The found loader, executing the module outside the modes; the module keeps the found
    loader as its own (``__loader__``, ``__spec__.loader``), so nothing after the import sees
    this one."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        create = getattr(self._loader, "create_module", None)  # optional for a loader
        created: ModuleType | None = create(spec) if create is not None else None
        return created

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        # what this imports (setting the modes aside imports torch's own helpers) is already
        # outside them
        _inside.active = True
        try:
            with _disable_current_modes(), torch._C.DisableTorchFunction():
                self._loader.exec_module(module)
        finally:
            _inside.active = False

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package...
        return getattr(self._loader, name)
