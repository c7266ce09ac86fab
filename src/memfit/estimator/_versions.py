"""The library versions an estimate assumed, and those of the machine that measured.

Memory depends on library versions, not only on the model: T5 takes 30-42% less under
transformers 5.24 than under 5.17, and torch's kernels and allocator change between releases.
An estimate is a statement about the versions it ran with, so it records them, and
``memfit validate`` shows them beside the GPU host's. Importing this module does not import
torch (the result types load without it).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, fields
from importlib import metadata

__all__ = ["LIBRARIES", "Versions", "installed_versions"]

# the libraries whose code decides what a step allocates, in the order reports list them
LIBRARIES = ("torch", "transformers", "timm", "torchvision")


@dataclass(frozen=True, slots=True)
class Versions:
    """Versions of torch, transformers, timm and torchvision; None where not installed (or,
    in results made before this was recorded, not known)."""

    torch: str | None = None
    transformers: str | None = None
    timm: str | None = None
    torchvision: str | None = None

    def items(self) -> list[tuple[str, str | None]]:
        """(library, version) in the order of :data:`LIBRARIES`."""
        return [(f.name, getattr(self, f.name)) for f in fields(self)]

    def to_dict(self) -> dict[str, str | None]:
        return dict(self.items())

    def differing(self, other: Versions) -> list[str]:
        """The libraries whose release differs between ``self`` and ``other`` (installed in
        one only included). The local part of a version (``+cu130``, ``+cpu``: which build
        of the same release) is not compared: a CPU build estimates for the CUDA build."""
        return [
            name
            for (name, mine), (_, theirs) in zip(self.items(), other.items(), strict=True)
            if _release(mine) != _release(theirs)
        ]


def _release(version: str | None) -> str | None:
    return None if version is None else version.partition("+")[0]


def installed_versions() -> Versions:
    """The versions this process runs with; None where not installed. torch's is
    ``torch.__version__`` (with its build, e.g. ``+cu130``); the others' are their installed
    distributions' (read without importing them, so the answer does not depend on which
    libraries this process happened to import)."""
    return Versions(**{name: _version_of(name) for name in LIBRARIES})


def _version_of(name: str) -> str | None:
    module = sys.modules.get(name) if name == "torch" else None
    if module is not None:
        return str(module.__version__)
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
