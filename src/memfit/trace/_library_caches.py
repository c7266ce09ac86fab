"""Module-level caches of libraries that a trace fills with fake tensors, emptied of them after.

A library that keeps a tensor it made once for the rest of the process keeps the trace's meta
tensor when the trace made it. bitsandbytes keeps its quantization map so (``name2qmap``,
filled by the first 4-bit or 8-bit quantization on a tensor's device): after an estimate of a
QLoRA or 8-bit step, a real quantization in the same process (``memfit.fit`` in a training
script) would copy the meta map to the GPU and fail. Each cache named here is left as the
trace found it, less any fake tensor the trace put in.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

__all__ = ["library_caches_kept"]

# (module, attribute): a dict of the module's that holds tensors for the rest of the process
_CACHES = (("bitsandbytes.functional", "name2qmap"),)


def _cache(module: str, attribute: str) -> dict[Any, Any] | None:
    found = getattr(sys.modules.get(module), attribute, None)
    return found if isinstance(found, dict) else None


@contextmanager
def library_caches_kept() -> Iterator[None]:
    """While this lasts, libraries may cache what they like; after, every cache of
    :data:`_CACHES` holds no tensor on the meta device (a module the trace imported
    included)."""
    try:
        yield
    finally:
        for module, attribute in _CACHES:
            cache = _cache(module, attribute)
            if cache is None:
                continue
            for key, value in list(cache.items()):
                if isinstance(value, torch.Tensor) and value.device.type == "meta":
                    del cache[key]
