"""Catch a CUDA out-of-memory error as it happens, and save what explains it.

This module imports only the standard library, and torch once the program has imported it,
so that ``memfit run`` can copy it beside a generated ``sitecustomize.py`` and load it into a
program whose Python has no memfit installed. Keep it that way: no ``memfit`` imports here.

What runs when:

* :func:`install` adds a hook (a directory and its options). Attaching the observer
  (``torch._C._cuda_attach_out_of_memory_observer``) and starting the allocator's history
  (``torch.cuda.memory._record_memory_history``) both initialise CUDA, so they are queued with
  ``torch.cuda._lazy_call`` and run when the program initialises CUDA itself, never sooner.
* :func:`on_oom` is the observer. The caching allocator calls it with
  ``(device, alloc_size, limit, device_free)`` after an allocation failed even with the cache
  freed, with its lock released, just before it raises ``torch.OutOfMemoryError``. ``limit``
  is the memory the process may use (the memory fraction's limit when one is set, else the
  device's total). It reads cheap facts (the allocator's statistics, NVML, the Python stacks,
  the model and optimizer in the stack's frames), takes ``torch.cuda.memory._snapshot()``,
  writes the snapshot and the facts (JSON, ``"status": "pending"``) and returns. It makes no
  CUDA allocation, and catches and logs its own errors: an exception leaving it would replace
  the ``OutOfMemoryError``.
* The report itself (replays of the trace, the ranking of fixes) needs memfit and seconds of
  CPU, so it is written once the error has surfaced, by ``memfit.oom.write_report``: when the
  ``with`` block exits, on ``close()``, at exit, or by ``memfit run`` after the child exits.
"""

from __future__ import annotations

import datetime
import json
import os
import pickle
import platform
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

__all__ = [
    "DEFAULT_MAX_ENTRIES",
    "DEFAULT_MAX_REPORTS",
    "ENV_DIR",
    "ENV_HISTORY",
    "ENV_MAX_ENTRIES",
    "SCHEMA",
    "Hook",
    "Probe",
    "arm_from_environment",
    "claim_stem",
    "install",
    "on_oom",
    "state",
    "uninstall",
]

SCHEMA = "memfit.oom/1"
DEFAULT_MAX_ENTRIES = 100_000
DEFAULT_MAX_REPORTS = 5
ENV_DIR = "MEMFIT_OOM_DIR"
ENV_HISTORY = "MEMFIT_OOM_HISTORY"
ENV_MAX_ENTRIES = "MEMFIT_OOM_MAX_ENTRIES"
_MAX_FRAMES = 200
_THIS_FILE = os.path.abspath(__file__)


@dataclass
class Hook:
    """One installed report directory and its options; ``captured`` lists its JSON files."""

    directory: str
    record_history: bool = True
    max_entries: int = DEFAULT_MAX_ENTRIES
    stacks: str = "python"
    max_reports: int = DEFAULT_MAX_REPORTS
    captured: list[str] = field(default_factory=list)
    skipped: int = 0
    closed: bool = False


class Probe:
    """What the observer reads from torch and NVML (tests replace it with a fake)."""

    def memory_stats(self, device: int) -> dict[str, Any]:
        import torch

        return dict(torch.cuda.memory_stats(device))

    def snapshot(self) -> dict[str, Any]:
        import torch

        data: dict[str, Any] = torch.cuda.memory._snapshot()
        return data

    def device(self, device: int) -> dict[str, Any]:
        import torch

        props = torch.cuda.get_device_properties(device)
        uuid = getattr(props, "uuid", None)
        return {
            "index": device,
            "name": str(props.name),
            "total": int(props.total_memory),
            "uuid": None if uuid is None else str(uuid),
        }

    def nvml_process_memory(self, device: dict[str, Any]) -> tuple[int | None, str | None]:
        """This process's memory on the device as nvidia-smi shows it, or why it is unknown."""
        try:
            import pynvml
        except ImportError:
            return None, "nvidia-ml-py is not installed"
        try:
            pynvml.nvmlInit()
            try:
                uuid = device.get("uuid")
                if uuid:
                    name = uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
                    handle = pynvml.nvmlDeviceGetHandleByUUID(name)
                else:
                    handle = pynvml.nvmlDeviceGetHandleByIndex(device["index"])
                for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    if proc.pid == os.getpid() and proc.usedGpuMemory is not None:
                        return int(proc.usedGpuMemory), None
                return None, "NVML does not list this process (in another PID namespace?)"
            finally:
                pynvml.nvmlShutdown()
        except pynvml.NVMLError as exc:
            return None, f"NVML: {exc}"


PROBE = Probe()

_lock = threading.RLock()
_hooks: list[Hook] = []
_queued = False  # a torch.cuda._lazy_call is waiting for CUDA's initialisation
_attached = False  # the observer is attached (it cannot be detached)
_history_started = False  # memfit started the allocator's history (and may stop it)
_busy = False  # the observer is running (an OOM inside it is not reported again)
_waiting = False  # arm_from_environment waits for torch's import


# --- installing -------------------------------------------------------------------------------


def install(
    directory: str,
    *,
    record_history: bool = True,
    max_entries: int = DEFAULT_MAX_ENTRIES,
    stacks: str = "python",
    max_reports: int = DEFAULT_MAX_REPORTS,
) -> Hook:
    """Report out-of-memory errors of this process into ``directory`` (created if missing)."""
    os.makedirs(directory, exist_ok=True)
    hook = Hook(os.path.abspath(directory), record_history, max_entries, stacks, max_reports)
    with _lock:
        _hooks.append(hook)
    _arm()
    return hook


def uninstall(hook: Hook) -> None:
    """Stop reporting into ``hook``'s directory; stop the history if memfit started it."""
    global _history_started
    with _lock:
        hook.closed = True
        if hook in _hooks:
            _hooks.remove(hook)
        wanted = any(h.record_history for h in _hooks)
        if _history_started and not wanted:
            import torch

            if torch.cuda.is_initialized():
                torch.cuda.memory._record_memory_history(enabled=None)
            _history_started = False


def _arm() -> None:
    global _queued
    import torch

    if torch.cuda.is_initialized():
        _on_cuda_init()
    elif not _queued:
        _queued = True
        torch.cuda._lazy_call(_on_cuda_init)


def _on_cuda_init() -> None:
    """Attach the observer and start the history (CUDA is initialised, or being so)."""
    global _attached, _history_started
    try:
        import torch

        with _lock:
            hooks = [h for h in _hooks if not h.closed]
            if not hooks:
                return
            if not _attached:
                attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer")  # noqa: B009
                attach(on_oom)
                _attached = True
            history = [h for h in hooks if h.record_history]
            enabled = getattr(torch._C, "_cuda_isHistoryEnabled", lambda: False)()
            if history and not _history_started and not enabled:
                torch.cuda.memory._record_memory_history(
                    "all",
                    context="all",
                    stacks=history[0].stacks,
                    max_entries=max(h.max_entries for h in history),
                )
                _history_started = True
    except Exception as exc:  # never break the program's CUDA initialisation
        _log(f"the out-of-memory report could not be set up: {exc!r}")


def state() -> dict[str, Any]:
    """Where the installation stands (for tests and ``memfit run``'s proof that it ran)."""
    with _lock:
        return {
            "directories": [h.directory for h in _hooks if not h.closed],
            "queued": _queued,
            "attached": _attached,
            "history_started": _history_started,
            "watching_torch_import": _waiting,
        }


# --- memfit run: install from the environment once torch is imported ------------------------


def arm_from_environment(after_import: Callable[[str, Callable[[], None]], None]) -> None:
    """Install from ``MEMFIT_OOM_*`` variables: now if torch is imported, else when it is,
    through ``after_import(name, callback)`` (the framework knobs' import watcher, which
    ``memfit run`` copies beside this module: one watcher for every setting that waits for an
    import).

    A Python process that never imports torch pays for nothing but this module's import.
    """
    global _waiting
    directory = os.environ.get(ENV_DIR)
    if not directory:
        return
    history = os.environ.get(ENV_HISTORY, "1") != "0"
    entries = int(os.environ.get(ENV_MAX_ENTRIES, str(DEFAULT_MAX_ENTRIES)))

    def install_now() -> None:
        global _waiting
        _waiting = False
        try:
            install(directory, record_history=history, max_entries=entries)
        except Exception as exc:
            _log(f"the out-of-memory report could not be set up: {exc!r}")

    if "torch" in sys.modules:
        install_now()
    else:
        _waiting = True
        after_import("torch", install_now)


# --- the observer ------------------------------------------------------------------------------


def on_oom(device: int, alloc: int, limit: int, free: int) -> None:
    """The out-of-memory observer: save the snapshot and the facts for every open hook."""
    global _busy
    try:
        with _lock:
            if _busy:
                return
            hooks = [h for h in _hooks if not h.closed]
            if not hooks:
                return
            _busy = True
            try:
                _capture(hooks, device, alloc, limit, free)
            finally:
                _busy = False
    except Exception as exc:  # an exception here would replace torch's OutOfMemoryError
        _log(f"could not save the out-of-memory facts: {exc!r}")


def _capture(hooks: list[Hook], device: int, alloc: int, limit: int, free: int) -> None:
    open_hooks = []
    for hook in hooks:
        if len(hook.captured) >= hook.max_reports:
            hook.skipped += 1
            if hook.skipped == 1:
                _log(
                    f"out of memory again; not saving more than {hook.max_reports} reports "
                    f"in {hook.directory}"
                )
        else:
            open_hooks.append(hook)
    if not open_hooks:
        return
    errors: list[str] = []
    facts = _facts(device, alloc, limit, free, errors)
    snapshot = _attempt(errors, "torch.cuda.memory._snapshot()", PROBE.snapshot)
    if snapshot is not None:
        _add_snapshot_facts(facts, snapshot, device)
    when = datetime.datetime.now()
    for hook in open_hooks:
        stem = claim_stem(hook.directory, when, os.getpid())
        base = os.path.join(hook.directory, stem)
        own = dict(facts, errors=list(errors), files={"json": stem + ".json"})
        if snapshot is not None:
            try:
                with open(base + ".pickle", "xb") as fh:
                    pickle.dump(snapshot, fh)
                own["files"]["snapshot"] = stem + ".pickle"
            except OSError as exc:
                own["errors"].append(f"the snapshot could not be written: {exc}")
        write_json(base + ".json", own)
        hook.captured.append(base + ".json")
        _log(
            f"CUDA out of memory on cuda:{device} (tried to allocate {_size(alloc)}); "
            f"saved the facts{' and the snapshot' if snapshot is not None else ''} to "
            f"{base}.*; the report follows once the error has surfaced"
        )


def claim_stem(directory: str, when: datetime.datetime, pid: int) -> str:
    """A file name stem no file in ``directory`` has yet: ``oom-YYYYmmdd-HHMMSS-pidN[-k]``.

    The stem is claimed by creating its ``.json`` exclusively, so two processes never share one.
    """
    base = f"oom-{when:%Y%m%d-%H%M%S}-pid{pid}"
    k = 1
    while True:
        stem = base if k == 1 else f"{base}-{k}"
        k += 1
        path = os.path.join(directory, stem)
        if os.path.exists(path + ".pickle") or os.path.exists(path + ".md"):
            continue
        try:
            os.close(os.open(path + ".json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except FileExistsError:
            continue
        return stem


def write_json(path: str, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` atomically (a temporary file, then a rename)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "x", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, default=str)
        fh.write("\n")
    os.replace(tmp, path)


def _facts(device: int, alloc: int, limit: int, free: int, errors: list[str]) -> dict[str, Any]:
    import torch

    dev = _attempt(errors, "the device's properties", PROBE.device, device) or {"index": device}
    stats = _attempt(errors, "torch.cuda.memory_stats()", PROBE.memory_stats, device) or {}
    nvml, nvml_note = PROBE.nvml_process_memory(dev)
    current = threading.current_thread()
    in_main = current is threading.main_thread()
    own_stack = _frames(sys._getframe())
    main_frame = sys._current_frames().get(threading.main_thread().ident or -1)
    main_stack = own_stack if in_main else _frames(main_frame)
    total = dev.get("total")
    fraction_limited = isinstance(total, int) and limit < total
    reserved = stats.get("reserved_bytes.all.current")
    available = free
    if fraction_limited and isinstance(reserved, int):
        available = max(min(free, limit - reserved), 0)
    grad = torch.is_grad_enabled() if in_main else None
    autocast = _attempt(errors, "the autocast state", _autocast, torch) if in_main else None
    frames = [f for f in (sys._getframe(), main_frame) if f is not None]
    model = _attempt(errors, "the model in the frames", _model_facts, torch, frames, device)
    distributed = _attempt(errors, "the process group", _distributed, torch)
    return {
        "schema": SCHEMA,
        "status": "pending",
        "time": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "pid": os.getpid(),
        "argv": list(sys.argv),
        "executable": sys.executable,
        "cwd": os.getcwd(),
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
        or os.environ.get("PYTORCH_ALLOC_CONF"),
        "device": dev,
        "failure": {
            "alloc_size": alloc,
            "block_size": None,
            "limit": limit,
            "fraction_limited": fraction_limited,
            "device_free": free,
            "available": available,
            "shortfall": max(alloc - available, 0),
            "thread": current.name,
            "in_main_thread": in_main,
            "phase": _phase(main_stack, in_main),
            "stack": own_stack,
            "main_stack": None if in_main else main_stack,
            "recorded_frames": None,
            "grad_enabled": grad,
            "autocast": autocast,
        },
        "memory": {
            "allocated": stats.get("allocated_bytes.all.current"),
            "reserved": reserved,
            "active": stats.get("active_bytes.all.current"),
            "requested": stats.get("requested_bytes.all.current"),
            "inactive_split": stats.get("inactive_split_bytes.all.current"),
            "segments": stats.get("segment.all.current"),
            "num_ooms": stats.get("num_ooms"),
            "largest_free_block": None,
            "nvml_process": nvml,
            "nvml_note": nvml_note,
        },
        "model": model,
        "distributed": distributed,
        "history": None,
        "allocator_settings": None,
    }


def _distributed(torch: Any) -> dict[str, Any] | None:
    """Which rank of a distributed job this is: from its process group where one is
    initialised, else from the launcher's variables (torchrun, deepspeed, accelerate)."""
    env = os.environ
    local = env.get("LOCAL_RANK")
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        return {
            "rank": dist.get_rank(),
            "world_size": dist.get_world_size(),
            "local_rank": None if local is None else int(local),
            "backend": str(dist.get_backend()),
        }
    if env.get("RANK") is None or env.get("WORLD_SIZE") is None:
        return None
    return {
        "rank": int(env["RANK"]),
        "world_size": int(env["WORLD_SIZE"]),
        "local_rank": None if local is None else int(local),
        "backend": None,
    }


def _add_snapshot_facts(facts: dict[str, Any], snapshot: dict[str, Any], device: int) -> None:
    """Facts from the snapshot: the failing entry's frames, the largest free block, settings."""
    traces = snapshot.get("device_traces") or []
    trace = traces[device] if device < len(traces) else []
    for entries in traces:
        for entry in entries[-1000:]:
            # torch names an oom entry's address field 'device_free'; memfit.snapshot.load
            # reads 'addr' (the same number), so the saved file carries both
            if entry.get("action") == "oom" and "addr" not in entry:
                entry["addr"] = entry.get("device_free", 0)
    oom = next((e for e in reversed(trace[-1000:]) if e.get("action") == "oom"), None)
    if oom is not None:
        facts["failure"]["block_size"] = oom.get("size")
        frames = oom.get("frames")
        if isinstance(frames, list):
            facts["failure"]["recorded_frames"] = [_plain_frame(f) for f in frames[:_MAX_FRAMES]]
    largest = 0
    for seg in snapshot.get("segments") or []:
        if seg.get("device", device) != device:
            continue
        for block in seg.get("blocks") or []:
            if block.get("state") == "inactive":
                largest = max(largest, int(block.get("size", 0)))
    facts["memory"]["largest_free_block"] = largest
    facts["history"] = {"entries": len(trace), "recorded": bool(trace)}
    settings = snapshot.get("allocator_settings")
    if isinstance(settings, dict):
        facts["allocator_settings"] = settings


def _plain_frame(frame: Any) -> dict[str, Any]:
    if not isinstance(frame, dict):
        return {"filename": "?", "line": 0, "name": str(frame)}
    return {
        "filename": str(frame.get("filename", "?")),
        "line": int(frame.get("line", 0) or 0),
        "name": str(frame.get("name", "?")),
    }


def _frames(frame: FrameType | None) -> list[dict[str, Any]]:
    """The Python stack from ``frame`` outwards, innermost first (as torch records stacks)."""
    out: list[dict[str, Any]] = []
    while frame is not None and len(out) < _MAX_FRAMES:
        code = frame.f_code
        if os.path.abspath(code.co_filename) != _THIS_FILE:
            out.append({"filename": code.co_filename, "line": frame.f_lineno, "name": code.co_name})
        frame = frame.f_back
    return out


def _phase(stack: list[dict[str, Any]], in_main: bool) -> str:
    """forward, backward, optimizer step, another thread or other: where the step was."""
    calls = [(f["filename"].replace("\\", "/"), f["name"]) for f in stack]
    if any("/torch/optim/" in name for name, _ in calls):
        return "optimizer step"
    backward = any(
        "/torch/autograd/" in name and fn in ("backward", "_engine_run_backward", "grad")
        for name, fn in calls
    )
    if backward:
        return "backward"
    if not in_main:
        return "another thread"
    if any(
        name.endswith("/torch/nn/modules/module.py") and fn in ("_call_impl", "_wrapped_call_impl")
        for name, fn in calls
    ):
        return "forward"
    return "other"


def _autocast(torch: Any) -> bool:
    try:
        return bool(torch.is_autocast_enabled("cuda"))
    except TypeError:  # torch < 2.4 takes no device type
        return bool(torch.is_autocast_enabled())


def _walk(frame: FrameType | None) -> Iterator[FrameType]:
    n = 0
    while frame is not None and n < _MAX_FRAMES:
        yield frame
        frame = frame.f_back
        n += 1


def _checkpointing_on(module: Any) -> bool:
    """The model's own checkpointing switch (``memfit.technique.checkpointing``'s
    ``checkpointing_on``, restated: this module imports the standard library only)."""
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(module), name):
            return getattr(module, name) is True
    return False


def _model_facts(torch: Any, frames: list[FrameType], device: int) -> dict[str, Any] | None:
    """The modules and optimizers named by local variables of the stacks, and their bytes."""
    modules: dict[int, Any] = {}
    optimizers: dict[int, Any] = {}
    for top in frames:
        for frame in _walk(top):
            if os.path.abspath(frame.f_code.co_filename) == _THIS_FILE:
                continue
            for value in list(frame.f_locals.values()):
                try:
                    if isinstance(value, torch.nn.Module):
                        modules[id(value)] = value
                    elif isinstance(value, torch.optim.Optimizer):
                        optimizers[id(value)] = value
                except Exception:  # a proxy object whose __class__ raises
                    continue
    if not modules and not optimizers:
        return None
    params: dict[int, Any] = {}
    for module in modules.values():
        params.update((id(p), p) for p in module.parameters())
    for opt in optimizers.values():
        for group in opt.param_groups:
            params.update((id(p), p) for p in group["params"])

    def here(t: Any) -> bool:
        return bool(torch.is_tensor(t) and t.is_cuda and t.get_device() == device)

    dtypes: dict[str, int] = {}
    param_bytes = grad_bytes = 0
    for p in params.values():
        if here(p):
            n = p.numel() * p.element_size()
            param_bytes += n
            key = str(p.dtype).replace("torch.", "")
            dtypes[key] = dtypes.get(key, 0) + n
        if here(p.grad):
            grad_bytes += p.grad.numel() * p.grad.element_size()
    state: dict[int, Any] = {}
    for opt in optimizers.values():
        for values in opt.state.values():
            state.update((id(v), v) for v in values.values() if here(v))
    biggest = max(
        modules.values(), key=lambda m: sum(p.numel() for p in m.parameters()), default=None
    )
    opt = next(iter(optimizers.values()), None)
    return {
        "name": None if biggest is None else type(biggest).__qualname__,
        "parameters": sum(p.numel() for p in params.values()),
        "parameter_bytes": param_bytes,
        "gradient_bytes": grad_bytes,
        "optimizer_state_bytes": sum(v.numel() * v.element_size() for v in state.values()),
        "dtypes": dtypes,
        "optimizer": None if opt is None else type(opt).__name__,
        "optimizer_foreach": None if opt is None else opt.defaults.get("foreach"),
        "optimizer_fused": None if opt is None else opt.defaults.get("fused"),
        "checkpointing": any(_checkpointing_on(m) for m in modules.values()),
        "huggingface": any(hasattr(m, "gradient_checkpointing_enable") for m in modules.values()),
    }


def _attempt(errors: list[str], what: str, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:  # each fact is optional: note why it is missing, go on
        errors.append(f"{what}: {exc!r}")
        return None


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    return f"{n} B"


def _log(message: str) -> None:
    try:
        sys.stderr.write(f"memfit: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed
        pass
