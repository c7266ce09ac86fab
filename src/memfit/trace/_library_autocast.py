"""Libraries' own autocast switches, made to see the traced model's meta device as CUDA.

transformers wraps code that must run in float32 (rotary embeddings' ``inv_freq @ positions``,
for one) in ``maybe_autocast(device_type=x.device.type, enabled=False)``, which returns a null
context for ``device_type == "meta"``. In a trace every tensor is on the meta device, so the
switch did nothing there and the emulated CUDA autocast cast the matmul to bf16, where on the
GPU (``device_type == "cuda"``) autocast is off and it runs in float32. transformers 5.17's
Llama rotary embedding does this (5.24's no longer calls it): the H200 trace of
``tinyllama-bf16mixed-b1-s8192-ckpt`` (transformers 5.17) shows the 2,097,152-byte float32
``freqs``/``emb`` of the GPU where the trace had 1,048,576-byte bf16 ones, and with them 524 MiB
less reserved. :func:`meta_autocast_as_cuda` makes ``maybe_autocast`` treat "meta" as "cuda"
(the torch autocast it then calls is the emulated one) for the trace's duration, and again
once the model is built: a first build imports transformers inside the trace (H100, torch
2.11: Canary's relative positions, float32 on the GPU, were bf16 in a fresh process's trace).

A compiled model's capture (dynamo, on CPU tensors) meets the same switch with
``device_type == "cpu"``, and dynamo 2.11 cannot trace its ``torch.is_autocast_enabled("cpu")``
(transformers 5.17's Llama: "torch.* op returned non-Tensor", a graph break where the GPU, with
"cuda", has none). :func:`maybe_autocast_traceable` makes it return ``torch.autocast`` directly
for the capture: the same region (switching off an autocast that is off changes nothing).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["maybe_autocast_traceable", "meta_autocast_as_cuda"]

_GENERIC = "transformers.utils.generic"
_NAME = "maybe_autocast"


def _as_cuda(original: Callable[..., Any]) -> Callable[..., Any]:
    def maybe_autocast(device_type: str, *args: Any, **kwargs: Any) -> Any:
        return original("cuda" if device_type == "meta" else device_type, *args, **kwargs)

    maybe_autocast.__wrapped__ = original  # type: ignore[attr-defined]
    return maybe_autocast


@contextmanager
def meta_autocast_as_cuda() -> Iterator[None]:
    """Patch transformers' ``maybe_autocast`` where it is loaded: in its module (so models
    imported during the trace take the patched one) and in every module that imported it by
    name; all restored on exit. Does nothing when transformers is not loaded."""
    with _patched(_as_cuda):
        yield


def _traceable(original: Callable[..., Any]) -> Callable[..., Any]:
    def maybe_autocast(
        device_type: str, dtype: Any = None, enabled: bool = True, cache_enabled: Any = None
    ) -> Any:
        import torch

        return torch.autocast(
            device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled
        )

    maybe_autocast.__wrapped__ = original  # type: ignore[attr-defined]
    return maybe_autocast


@contextmanager
def maybe_autocast_traceable() -> Iterator[None]:
    """transformers' ``maybe_autocast`` as plain ``torch.autocast`` while a compiled model is
    captured, restored on exit; nothing when transformers is not loaded."""
    with _patched(_traceable):
        yield


@contextmanager
def _patched(make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Iterator[None]:
    """``maybe_autocast`` replaced by ``make(original)`` in every module that holds it."""
    generic = sys.modules.get(_GENERIC)
    original = getattr(generic, _NAME, None) if generic is not None else None
    if original is None or not callable(original):
        yield
        return
    patched = make(original)
    holders = _holders(original)
    for module in holders:
        setattr(module, _NAME, patched)
    try:
        yield
    finally:
        for module in [*holders, *_holders(patched)]:
            setattr(module, _NAME, original)


def _holders(function: Callable[..., Any]) -> list[Any]:
    """The loaded modules whose ``maybe_autocast`` is ``function`` (read from their
    ``__dict__``: a lazy module's ``__getattr__`` would import things)."""
    return [
        module
        for module in list(sys.modules.values())
        if getattr(module, "__dict__", {}).get(_NAME) is function
    ]
