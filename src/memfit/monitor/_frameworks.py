"""The memory knobs of torch, TensorFlow and JAX, turned inside the user's process.

This module imports only the standard library, and a framework only once the program has
imported it (through ``sys.modules``): ``memfit run`` copies it beside its ``sitecustomize`` as
``_memfit_frameworks``, so a TensorFlow or JAX program whose Python has no memfit is
configured too. Keep it that way: no ``memfit`` imports here. Whether a runtime has started is
asked of the function given (``memfit.monitor._framework_numbers.started``, or its copy).

Each framework reads its settings at a different moment, and ignores them silently after:

- torch: ``PYTORCH_CUDA_ALLOC_CONF`` / ``PYTORCH_NO_CUDA_MEMORY_CACHING`` when CUDA starts;
  ``set_per_process_memory_fraction`` at any time (set here per device when CUDA starts);
- TensorFlow: ``TF_FORCE_GPU_ALLOW_GROWTH`` / ``TF_GPU_ALLOCATOR`` and the logical device
  configuration (a memory limit) when its runtime (the eager context) starts;
- JAX: ``XLA_PYTHON_CLIENT_PREALLOCATE``, ``XLA_CLIENT_MEM_FRACTION`` (older JAX:
  ``XLA_PYTHON_CLIENT_MEM_FRACTION``) and ``XLA_PYTHON_CLIENT_ALLOCATOR`` when its first backend
  starts.

:func:`configure` sets what it can now, leaves a hook for what must wait for an import or for
CUDA, and says "too late" for what the started runtime will no longer read. Settings arrive as a
plain dict (see ``memfit.monitor._configure``, which validates them); the answer is a list of
plain dicts, one per action.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Callable, MutableMapping
from typing import Any

__all__ = [
    "ENV_SETTINGS",
    "JAX_FRACTIONS",
    "after_import",
    "arm_from_environment",
    "configure",
    "jax_fraction_variable",
    "pending_imports",
]

ENV_SETTINGS = "MEMFIT_MEMORY"  # JSON of the settings memfit run's child applies at import
TORCH_CONF = "PYTORCH_CUDA_ALLOC_CONF"
TORCH_CONFS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
JAX_FRACTIONS = ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION")
MiB = 1 << 20

Action = dict[str, Any]
Environ = MutableMapping[str, str]


# --- configuration --------------------------------------------------------------------------


def configure(
    settings: dict[str, Any],
    frameworks: list[str],
    environ: Environ | None = None,
    *,
    started: Callable[[str], bool],
    in_process: bool = True,
    dry: bool = False,
) -> list[Action]:
    """Apply ``settings`` for ``frameworks``: environment variables in ``environ`` (this
    process's by default), and, ``in_process``, the runtime calls now or at import / CUDA start.
    With ``in_process=False`` (``memfit run``'s parent) nothing is imported or hooked: the
    runtime parts are listed as ``"pending"``, for the child's copy of this module to apply.
    ``dry``: say what would be done in this process, calling and hooking nothing (``environ``
    is still written: give a copy). ``started(framework)``: whether its runtime has started."""
    env: Environ = os.environ if environ is None else environ
    actions: list[Action] = []
    for framework in frameworks:
        late = in_process and started(framework)
        imported = in_process and framework in sys.modules
        plan = _PLANS[framework]
        hook = in_process and not dry
        actions.extend(plan(settings, env, late=late, imported=imported, hook=hook))
    return actions


def _action(framework: str, setting: str, status: str, what: str, why: str = "") -> Action:
    return {"framework": framework, "setting": setting, "status": status, "what": what, "why": why}


def _unsupported(framework: str, setting: str, why: str) -> Action:
    return _action(framework, setting, "unsupported", "nothing set", why)


def _set_env(
    env: Environ, framework: str, setting: str, name: str, value: str | None, late: bool
) -> Action:
    """Set (``value`` None: unset) one environment variable, saying what it replaced."""
    old = env.get(name)
    what = f"{name}={value}" if value is not None else f"unset {name}"
    if late:
        return _action(framework, setting, "too late", what, _LATE_WHY[framework])
    if old == value:
        return _action(framework, setting, "set", what, "already so")
    if value is None:
        del env[name]
    else:
        env[name] = value
    return _action(framework, setting, "set", what, "" if old is None else f"was {old}")


_LATE_WHY = {
    "torch": "torch has read its allocator settings in this process (at import; "
    "PYTORCH_NO_CUDA_MEMORY_CACHING when CUDA started)",
    "tensorflow": "TensorFlow's runtime has started in this process: it read its GPU settings then",
    "jax": "JAX's backend has started in this process: it read its settings then",
}


def _conf_items(text: str) -> list[tuple[str, str]]:
    items = []
    for part in text.split(","):
        key, _, value = part.partition(":")
        if key.strip():
            items.append((key.strip(), value.strip()))
    return items


def _merge_conf(env: Environ, setting: str, key: str, value: str | None, late: bool) -> Action:
    """Set (``value`` None: drop) ``key`` in torch's allocator settings, keeping the others."""
    name = next((n for n in TORCH_CONFS if env.get(n)), TORCH_CONF)
    items = [(k, v) for k, v in _conf_items(env.get(name, "")) if k != key]
    if value is not None:
        items.append((key, value))
    text = ",".join(f"{k}:{v}" for k, v in items)
    return _set_env(env, "torch", setting, name, text or None, late)


def _torch_plan(
    s: dict[str, Any], env: Environ, *, late: bool, imported: bool, hook: bool
) -> list[Action]:
    out = []
    if s.get("growth") is not None:
        out.append(
            _action(
                "torch",
                "growth",
                "already" if s["growth"] else "unsupported",
                "nothing to set",
                "PyTorch's caching allocator always takes memory as it is needed"
                if s["growth"]
                else "PyTorch cannot map its pool up front; a limit caps it",
            )
        )
    if s.get("limit_bytes") is not None or s.get("limit_fraction") is not None:
        out.append(_torch_limit(s, late=late, imported=imported, hook=hook))
    # torch reads its allocator settings when it is imported (the backend then and only then;
    # the rest can change later through its settings call) and PYTORCH_NO_CUDA_MEMORY_CACHING
    # at its first allocation
    allocator = s.get("allocator")
    loaded = late or imported
    if allocator == "async":
        out.append(_merge_conf(env, "allocator", "backend", "cudaMallocAsync", loaded))
    elif allocator == "expandable":
        if loaded:
            out.append(_torch_expandable_now(hook))
        else:
            out.append(_merge_conf(env, "allocator", "expandable_segments", "True", False))
    elif allocator == "platform":
        out.append(_set_env(env, "torch", "allocator", "PYTORCH_NO_CUDA_MEMORY_CACHING", "1", late))
    elif allocator == "default":
        out.append(_merge_conf(env, "allocator", "backend", None, loaded))
        out.append(_merge_conf(env, "allocator", "expandable_segments", None, loaded))
        out.append(
            _set_env(env, "torch", "allocator", "PYTORCH_NO_CUDA_MEMORY_CACHING", None, late)
        )
    return out


def _torch_limit(s: dict[str, Any], *, late: bool, imported: bool, hook: bool) -> Action:
    what = "torch.cuda.set_per_process_memory_fraction on every GPU"
    if late:
        if hook:
            _apply_torch_limit(s)
        return _action("torch", "limit", "applied", what, "now")
    if hook and imported:
        sys.modules["torch"].cuda._lazy_call(lambda: _safely(_apply_torch_limit, s))
    elif hook:
        after_import(
            "torch",
            lambda: sys.modules["torch"].cuda._lazy_call(lambda: _safely(_apply_torch_limit, s)),
        )
    return _action("torch", "limit", "pending", what, "when CUDA starts")


def _safely(apply: Callable[[dict[str, Any]], None], s: dict[str, Any]) -> None:
    """Run ``apply`` as CUDA starts, never breaking the start: a failure is said, not raised
    (torch would turn it into an error of the program's first CUDA call)."""
    try:
        apply(s)
    except Exception as exc:
        _log(f"the memory limit could not be set: {exc!r}")


def _apply_torch_limit(s: dict[str, Any]) -> None:
    """A size is divided by each GPU's own total as torch counts it (a little below NVML's:
    150.11 GB against 150.75 GB on an H200), so torch's cap is the size asked for."""
    cuda = sys.modules["torch"].cuda
    for device in range(cuda.device_count()):
        fraction = s.get("limit_fraction")
        if s.get("limit_given") == "bytes" or fraction is None:
            total = cuda.get_device_properties(device).total_memory
            fraction = s["limit_bytes"] / total
        if fraction > 1:
            _log(f"GPU {device} is smaller than the limit of {s['limit_bytes']} bytes: left as is")
            continue
        cuda.set_per_process_memory_fraction(float(fraction), device)


def _torch_expandable_now(apply: bool) -> Action:
    what = "expandable_segments:True through torch's allocator settings"
    if apply:
        torch = sys.modules["torch"]
        change = getattr(torch._C, "_accelerator_setAllocatorSettings", None)
        if change is None:  # torch before 2.9
            change = torch.cuda.memory._set_allocator_settings
        change("expandable_segments:True")
    return _action("torch", "allocator", "applied", what, "now (new segments)")


def _tensorflow_plan(
    s: dict[str, Any], env: Environ, *, late: bool, imported: bool, hook: bool
) -> list[Action]:
    out = []
    growth = s.get("growth")
    if growth is not None:
        value = "true" if growth else "false"
        out.append(_set_env(env, "tensorflow", "growth", "TF_FORCE_GPU_ALLOW_GROWTH", value, late))
    if s.get("limit_bytes") is not None:
        out.append(_tensorflow_limit(s["limit_bytes"], late=late, imported=imported, hook=hook))
    elif s.get("limit_fraction") is not None:
        out.append(
            _unsupported(
                "tensorflow",
                "limit",
                "TensorFlow takes a limit in bytes, and NVML could not tell the GPU's size "
                "here to turn the share into one: give the limit as a size",
            )
        )
    allocator = s.get("allocator")
    if allocator == "async":
        out.append(
            _set_env(env, "tensorflow", "allocator", "TF_GPU_ALLOCATOR", "cuda_malloc_async", late)
        )
    elif allocator == "default":
        out.append(_set_env(env, "tensorflow", "allocator", "TF_GPU_ALLOCATOR", None, late))
    elif allocator in ("platform", "expandable"):
        out.append(
            _unsupported(
                "tensorflow",
                "allocator",
                f"TensorFlow has no {allocator} allocator (it has its BFC allocator and "
                "cuda_malloc_async)",
            )
        )
    return out


def _tensorflow_limit(limit: int, *, late: bool, imported: bool, hook: bool) -> Action:
    what = f"a logical device of {limit // MiB} MiB on every GPU"
    if late:
        return _action("tensorflow", "limit", "too late", what, _LATE_WHY["tensorflow"])
    if imported:
        if hook:
            _apply_tensorflow_limit(limit)
        return _action("tensorflow", "limit", "applied", what, "now")
    if hook:
        after_import("tensorflow", lambda: _apply_tensorflow_limit(limit))
    return _action("tensorflow", "limit", "pending", what, "when tensorflow is imported")


def _apply_tensorflow_limit(limit: int) -> None:
    tf = sys.modules["tensorflow"]
    for gpu in tf.config.list_physical_devices("GPU"):
        config = tf.config.LogicalDeviceConfiguration(memory_limit=limit // MiB)
        tf.config.set_logical_device_configuration(gpu, [config])


def _jax_plan(
    s: dict[str, Any], env: Environ, *, late: bool, imported: bool, hook: bool
) -> list[Action]:
    out = []
    growth = s.get("growth")
    if growth is not None:
        value = "false" if growth else "true"
        out.append(_set_env(env, "jax", "growth", "XLA_PYTHON_CLIENT_PREALLOCATE", value, late))
    fraction = s.get("limit_fraction")
    if fraction is not None:
        name = jax_fraction_variable()
        for other in JAX_FRACTIONS:  # JAX refuses both at once
            if other != name and other in env:
                out.append(_set_env(env, "jax", "limit", other, None, late))
        out.append(_set_env(env, "jax", "limit", name, f"{fraction:.6g}", late))
    elif s.get("limit_bytes") is not None:
        out.append(
            _unsupported(
                "jax",
                "limit",
                "JAX takes a share of the GPU, and NVML could not tell the GPU's size here "
                "to turn the size into one: give the limit as a share, e.g. 0.5",
            )
        )
    allocator = s.get("allocator")
    names = {"async": "cuda_async", "platform": "platform", "default": None}
    if allocator in names:
        out.append(
            _set_env(env, "jax", "allocator", "XLA_PYTHON_CLIENT_ALLOCATOR", names[allocator], late)
        )
    elif allocator == "expandable":
        out.append(
            _unsupported(
                "jax",
                "allocator",
                "JAX has no expandable-segments allocator",
            )
        )
    return out


def jax_fraction_variable() -> str:
    """The memory-fraction variable the installed JAX reads (newer JAX renamed it), found in its
    source, never by importing it (an import starts nothing, but costs a second)."""
    try:
        spec = importlib.util.find_spec("jaxlib.xla_client")
    except (ImportError, ValueError):
        spec = None
    origin = getattr(spec, "origin", None)
    if origin:
        try:
            with open(origin, encoding="utf-8") as f:
                if "'XLA_CLIENT_MEM_FRACTION'" in f.read():
                    return JAX_FRACTIONS[0]
        except OSError:
            pass
    return JAX_FRACTIONS[1]


_PLANS: dict[str, Callable[..., list[Action]]] = {
    "torch": _torch_plan,
    "tensorflow": _tensorflow_plan,
    "jax": _jax_plan,
}


# --- memfit run's child: apply the runtime parts at import --------------------------------


def arm_from_environment(started: Callable[[str], bool]) -> list[Action]:
    """Apply the runtime parts of the settings ``memfit run`` left in ``MEMFIT_MEMORY`` (the
    environment variables are set already): now for a framework imported, else at import."""
    text = os.environ.get(ENV_SETTINGS)
    if not text:
        return []
    doc = json.loads(text)
    keys = ("limit_bytes", "limit_fraction", "limit_given")
    settings = {k: v for k, v in doc["settings"].items() if k in keys}
    if settings.get("limit_given") is None:
        return []
    if "jax" in doc["frameworks"]:
        _match_jax_fraction()
    frameworks = [f for f in doc["frameworks"] if f != "jax"]
    return configure(settings, frameworks, {}, started=started)


def _match_jax_fraction() -> None:
    """The parent named JAX's fraction by the JAX its own Python has (or the older name, with
    none): renamed here, before JAX starts, to the name this Python's JAX reads."""
    wanted = jax_fraction_variable()
    for other in JAX_FRACTIONS:
        if other != wanted and other in os.environ and wanted not in os.environ:
            os.environ[wanted] = os.environ.pop(other)


class _ImportWatcher:
    """A meta path finder that runs callbacks right after ``import <name>`` completes."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.callbacks: list[Callable[[], None]] = []
        self._searching = False

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != self.name or self._searching:
            return None
        self._searching = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._searching = False
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return None
        original = loader.exec_module
        watcher = self

        def exec_module(module: Any) -> None:
            original(module)
            if watcher in sys.meta_path:
                sys.meta_path.remove(watcher)
            _watchers.pop(watcher.name, None)
            for callback in watcher.callbacks:
                try:
                    callback()
                except Exception as exc:  # never break the program's import
                    _log(f"what was to follow the import of {watcher.name} failed: {exc!r}")

        loader.exec_module = exec_module
        return spec


_watchers: dict[str, _ImportWatcher] = {}


def after_import(name: str, callback: Callable[[], None]) -> None:
    """Run ``callback`` right after ``import <name>`` completes (in the order given; one
    meta path finder per module name, whoever asks: the knobs, and in ``memfit run``'s child the
    out-of-memory observer)."""
    watcher = _watchers.get(name)
    if watcher is None:
        watcher = _watchers[name] = _ImportWatcher(name)
        sys.meta_path.insert(0, watcher)
    watcher.callbacks.append(callback)


def pending_imports() -> list[str]:
    """The imports this process waits for to apply a setting or install the out-of-memory
    observer (for tests and reports)."""
    return sorted(_watchers)


def _log(message: str) -> None:
    try:
        sys.stderr.write(f"memfit: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
