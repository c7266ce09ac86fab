"""One exception tree: every exception memfit exports is a ``MemfitError``, drawn in _errors."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import memfit
import memfit._errors
from memfit import MemfitError

# public modules that need an optional extra to import
_OPTIONAL = {"memfit.integrations.hf": "transformers", "memfit.integrations.lightning": "lightning"}


def _public_modules() -> list[str]:
    """memfit, its packages, and their public (not underscored) modules."""
    names = ["memfit"]
    for info in pkgutil.walk_packages(memfit.__path__, "memfit."):
        if not any(part.startswith("_") for part in info.name.split(".")[1:]):
            names.append(info.name)
    return names


def _exported_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for name in _public_modules():
        if name in _OPTIONAL:
            pytest.importorskip(_OPTIONAL[name])
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", []):
            obj = getattr(module, attr)
            if inspect.isclass(obj) and issubclass(obj, BaseException):
                found[f"{name}.{attr}"] = obj
    return found


def test_every_exported_exception_is_a_memfit_error():
    exported = _exported_exceptions()
    assert "memfit.monitor.NvmlCallError" in exported  # the walk reaches the packages
    outside = sorted(
        name
        for name, cls in exported.items()
        if not issubclass(cls, MemfitError) and not issubclass(cls, Warning)  # warnings: drawn
    )
    assert outside == []


def test_the_drawn_tree_names_every_exported_exception():
    drawing = memfit._errors.__doc__ or ""
    missing = sorted(
        {cls.__name__ for cls in _exported_exceptions().values()} - set(drawing.split())
    )
    assert missing == []


def test_the_new_members_keep_their_old_bases():
    from memfit.allocator import AllocatorOOM
    from memfit.monitor import NvmlCallError

    err = NvmlCallError("GpuIsLost", "fell off the bus")
    assert isinstance(err, MemfitError) and err.kind == "GpuIsLost"
    assert str(err) == "GpuIsLost: fell off the bus"
    assert issubclass(AllocatorOOM, MemfitError)


def test_a_workload_memfit_cannot_estimate_yet_is_not_bad_input():
    # a torch.compile'd step is valid input: refused as unsupported (with the way forward),
    # not as a malformed value
    from memfit import UnsupportedWorkloadError

    assert issubclass(UnsupportedWorkloadError, MemfitError)
    assert not issubclass(UnsupportedWorkloadError, memfit.InvalidInputError)
    assert "UnsupportedWorkloadError" in memfit.__all__
