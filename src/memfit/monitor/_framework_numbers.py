"""torch's, TensorFlow's and JAX's own memory numbers and the settings they run with, read
inside the user's process.

This module imports only the standard library, and a framework only once the program has
imported it (through ``sys.modules``): ``memfit run`` copies it beside its ``sitecustomize`` as
``_memfit_framework_numbers``, where the publisher reads a TensorFlow or JAX program's numbers
for ``memfit watch`` even when its Python has no memfit. Keep it that way: no ``memfit``
imports here. Nothing here starts a runtime: a framework is read once it has started.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

__all__ = [
    "ENV_NAMES",
    "FRAMEWORKS",
    "gpu_started",
    "read_stats",
    "settings_in_force",
    "started",
]

FRAMEWORKS = ("torch", "tensorflow", "jax")
MiB = 1 << 20


# --- has a framework's runtime started? --------------------------------------------------------


def started(framework: str) -> bool:
    """Whether ``framework``'s runtime has started, so that it no longer reads its settings."""
    if framework == "torch":
        torch = sys.modules.get("torch")
        cuda = getattr(torch, "cuda", None)
        return bool(cuda is not None and cuda.is_initialized())
    if framework == "tensorflow":
        context = sys.modules.get("tensorflow.python.eager.context")
        ctx = getattr(context, "context", None)
        return bool(ctx is not None and getattr(ctx(), "_context_handle", None) is not None)
    if framework == "jax":
        bridge = sys.modules.get("jax._src.xla_bridge")
        ask = getattr(bridge, "backends_are_initialized", None)
        return bool(ask is not None and ask())
    raise ValueError(f"unknown framework {framework!r}")


def gpu_started() -> bool:
    """Whether any framework of this process has started on a GPU (what ``memfit run``'s
    publisher waits for)."""
    return any(
        s.get("kind") == "gpu" for f in FRAMEWORKS if f != "torch" for s in read_stats(f)
    ) or started("torch")


# --- numbers --------------------------------------------------------------------------------


def read_stats(framework: str) -> list[dict[str, Any]]:
    """``framework``'s own memory numbers per device, in one schema (bytes; ``None`` where the
    framework does not say), without starting anything: nothing before its runtime started."""
    if framework not in sys.modules or not started(framework):
        return []
    return _READERS[framework]()


def _entry(framework: str, kind: str, ordinal: int, **numbers: Any) -> dict[str, Any]:
    index, uuid = _nvml_identity(ordinal) if kind == "gpu" else (None, None)
    values = {k: None if v is None else int(v) for k, v in numbers.items()}
    return {
        "framework": framework,
        "device": f"{kind}:{ordinal}",
        "kind": kind,
        "index": index,
        "uuid": uuid,
        **values,
    }


def _nvml_identity(ordinal: int) -> tuple[int | None, str | None]:
    """The NVML index or UUID of the ``ordinal``-th visible GPU, from ``CUDA_VISIBLE_DEVICES``."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return ordinal, None
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    if ordinal >= len(entries):
        return None, None
    entry = entries[ordinal]
    if entry.isdigit():
        return int(entry), None
    return None, entry if entry.startswith(("GPU-", "MIG-")) else None


def _torch_stats() -> list[dict[str, Any]]:
    cuda = sys.modules["torch"].cuda
    out = []
    for device in range(cuda.device_count()):
        stats = cuda.memory_stats(device)
        pool = stats.get("reserved_bytes.all.current", 0)
        if not pool and not stats.get("reserved_bytes.all.peak", 0):
            continue  # a device this process never used
        fraction = _torch_fraction(cuda, device)
        limit = None
        if fraction is not None and fraction < 1:
            limit = fraction * cuda.get_device_properties(device).total_memory
        out.append(
            _entry(
                "torch",
                "gpu",
                device,
                in_use=stats.get("allocated_bytes.all.current", 0),
                peak=stats.get("allocated_bytes.all.peak", 0),
                pool=pool,
                limit=limit,
            )
        )
    return out


def _torch_fraction(cuda: Any, device: int) -> float | None:
    ask = getattr(cuda, "get_per_process_memory_fraction", None)
    if ask is None:
        return None
    try:
        return float(ask(device))
    except Exception:  # an older torch, or a device that cannot tell
        return None


def _tensorflow_stats() -> list[dict[str, Any]]:
    tf = sys.modules["tensorflow"]
    out = []
    for kind in ("GPU", "CPU"):
        physical = tf.config.list_physical_devices(kind)
        for ordinal, device in enumerate(tf.config.list_logical_devices(kind)):
            info = _tensorflow_memory_info(tf, device.name)
            limit = None
            if kind == "GPU" and ordinal < len(physical):
                configs = tf.config.get_logical_device_configuration(physical[ordinal]) or []
                limits = [c.memory_limit for c in configs if c.memory_limit is not None]
                limit = sum(limits) * MiB if limits else None
            out.append(
                _entry(
                    "tensorflow",
                    kind.lower(),
                    ordinal,
                    in_use=info.get("current"),
                    peak=info.get("peak"),
                    pool=None,
                    limit=limit,
                )
            )
    return out


def _tensorflow_memory_info(tf: Any, name: str) -> dict[str, Any]:
    """TensorFlow's current and peak bytes of a device; nothing where its allocator keeps no
    statistics. TensorFlow 2.21's CPU allocator keeps them as a BFC allocator
    (``TF_CPU_ALLOCATOR_USE_BFC=true``); on the AMD EPYC that runs this project's CI it is not
    one by default and raises ``ValueError: Allocator stats not available``, where earlier CI
    machines gave numbers."""
    try:
        info = tf.config.experimental.get_memory_info(name)
    except ValueError:
        return {}
    return dict(info)


def _jax_stats() -> list[dict[str, Any]]:
    jax = sys.modules["jax"]
    out = []
    for device in jax.local_devices():
        stats = device.memory_stats() or {}
        kind = "gpu" if device.platform in ("gpu", "cuda", "rocm") else device.platform
        ordinal = getattr(device, "local_hardware_id", None)
        out.append(
            _entry(
                "jax",
                kind,
                device.id if ordinal is None else ordinal,
                in_use=stats.get("bytes_in_use"),
                peak=stats.get("peak_bytes_in_use"),
                pool=stats.get("pool_bytes", stats.get("bytes_reserved")),
                limit=stats.get("bytes_limit"),
            )
        )
    return out


_READERS: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "torch": _torch_stats,
    "tensorflow": _tensorflow_stats,
    "jax": _jax_stats,
}


# --- the settings in force ------------------------------------------------------------------

ENV_NAMES = (
    "CUDA_VISIBLE_DEVICES",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
    "PYTORCH_NO_CUDA_MEMORY_CACHING",
    "TF_FORCE_GPU_ALLOW_GROWTH",
    "TF_GPU_ALLOCATOR",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_ALLOCATOR",
)


def settings_in_force() -> dict[str, Any]:
    """What this process runs with: its memory variables, which frameworks are imported and
    started, and what a started runtime says of itself (torch's allocator backend and
    per-GPU fractions, TensorFlow's growth and limits per GPU)."""
    out: dict[str, Any] = {"environment": {n: os.environ.get(n) for n in ENV_NAMES}}
    for framework in FRAMEWORKS:
        if framework not in sys.modules:
            continue
        entry: dict[str, Any] = {"started": started(framework)}
        try:
            if entry["started"] and framework == "torch":
                cuda = sys.modules["torch"].cuda
                entry["backend"] = cuda.get_allocator_backend()
                entry["fractions"] = [_torch_fraction(cuda, d) for d in range(cuda.device_count())]
            elif framework == "tensorflow":
                tf = sys.modules["tensorflow"]
                gpus = tf.config.list_physical_devices("GPU")
                entry["growth"] = [tf.config.experimental.get_memory_growth(g) for g in gpus]
        except Exception as exc:  # a framework that cannot say: say why
            entry["error"] = f"{type(exc).__name__}: {exc}"
        out[framework] = entry
    return out
