"""Publish this process's PyTorch allocator stats where ``memfit watch`` and ``export`` read them.

A daemon thread writes one small JSON file, ``<runtime dir>/<pid>.json``, every ``interval``
seconds (write to a temporary name, then ``os.replace``: readers never see half a file) and
removes it when stopped, at exit, or when the ``with`` block ends. The numbers come from
``torch.cuda.memory_stats(device)``, which reads host-side counters: no CUDA call, no sync.
CUDA is never initialised by the publisher: until the program does it, the file says
``"cuda_initialised": false``.

The runtime directory is ``$MEMFIT_RUNTIME_DIR``, else ``$XDG_RUNTIME_DIR/memfit``, else
``/tmp/memfit-<uid>``, created with mode 0700: a user sees only their own processes' stats.

This module imports only the standard library, and torch once the program has imported it,
so ``memfit run`` can copy it beside its ``sitecustomize`` into a Python without memfit (see
``memfit.oom._bootstrap``). Keep it that way: no ``memfit`` imports here.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from typing import Any

__all__ = [
    "ENV_DIR",
    "ENV_INTERVAL",
    "ENV_PUBLISH",
    "SCHEMA",
    "Publisher",
    "active",
    "arm_from_environment",
    "prepare_runtime_dir",
    "runtime_dir",
    "start_ticks",
]

SCHEMA = "memfit.publish/1"
ENV_DIR = "MEMFIT_RUNTIME_DIR"
ENV_PUBLISH = "MEMFIT_PUBLISH"  # "0": memfit run does not publish from its child processes
ENV_INTERVAL = "MEMFIT_PUBLISH_INTERVAL"


def runtime_dir() -> str:
    """Where publishers write and readers look (see the module docstring)."""
    explicit = os.environ.get(ENV_DIR)
    if explicit:
        return explicit
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return os.path.join(xdg, "memfit")
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return f"/tmp/memfit-{uid}"


def prepare_runtime_dir(directory: str) -> str:
    """Create ``directory`` (mode 0700) and check it is ours, not planted by another user."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    if hasattr(os, "getuid"):
        info = os.stat(directory)
        if info.st_uid != os.getuid():
            raise PermissionError(
                f"the runtime directory {directory} belongs to uid {info.st_uid}, not to this "
                f"user; set {ENV_DIR} to a directory of your own"
            )
        if info.st_mode & 0o077:
            os.chmod(directory, 0o700)
    return directory


def start_ticks(pid: int, proc: str = "/proc") -> int | None:
    """When ``pid`` started, in clock ticks since boot (``/proc/PID/stat`` field 22), to tell a
    process from a later one with the same pid; ``None`` if it does not exist (or no /proc)."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            stat = f.read()
        return int(stat.rsplit(b")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _uuid(props: Any) -> str | None:
    uuid = getattr(props, "uuid", None)
    if uuid is None:
        return None
    text = str(uuid)
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


class Publisher:
    """Writes this process's allocator stats every ``interval`` seconds (see the module doc).

    ``wait_for_cuda``: write nothing until the program has started a GPU (what ``memfit run``
    uses, so processes that never use a GPU leave no file). ``frameworks``: the module that
    reads TensorFlow's and JAX's numbers too (``memfit.monitor._framework_numbers``, or the copy
    ``memfit run`` writes); without it only torch is read. Call :meth:`step` once per training
    step to show a step counter beside the stats.
    """

    def __init__(
        self,
        interval: float = 1.0,
        directory: str | None = None,
        *,
        wait_for_cuda: bool = False,
        frameworks: Any = None,
    ) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval!r}")
        self.interval = float(interval)
        self.directory = directory or runtime_dir()
        self.wait_for_cuda = wait_for_cuda
        self.frameworks = frameworks
        self.pid = os.getpid()
        self.path = os.path.join(self.directory, f"{self.pid}.json")
        self.steps: int | None = None
        self.writes = 0
        self._ticks = start_ticks(self.pid)
        self._uuids: dict[int, str | None] = {}
        self._stop = threading.Event()
        self._writing = threading.Lock()  # the thread and a caller of publish_now, one at a time
        self._thread: threading.Thread | None = None
        self._failed: str | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> Publisher:
        """Create the directory and start the thread (again after :meth:`stop`)."""
        if self.running:
            return self
        prepare_runtime_dir(self.directory)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="memfit-publisher", daemon=True)
        self._thread.start()
        atexit.register(self.stop)
        return self

    def step(self, count: int = 1) -> None:
        """Count ``count`` training steps (published with the stats)."""
        self.steps = (self.steps or 0) + count

    def stop(self) -> None:
        """Stop the thread and remove the file (only in the process that wrote it)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)
        atexit.unregister(self.stop)
        if os.getpid() == self.pid:
            for path in (self.path, self.path + ".tmp"):
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    _log(f"could not remove {path}: {exc}")

    def __enter__(self) -> Publisher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while True:
            self.publish_now()
            if self._stop.wait(self.interval):
                return

    def publish_now(self) -> bool:
        """Write the stats once now; ``False`` when there was nothing to write or it failed."""
        with self._writing:
            return self._publish()

    def _publish(self) -> bool:
        try:
            payload = self.payload()
            if payload is None:
                return False
            tmp = self.path + ".tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(payload, f, separators=(",", ":"))
            os.replace(tmp, self.path)
            self.writes += 1
            return True
        except Exception as exc:  # never break the program: say it once, go on
            message = f"{type(exc).__name__}: {exc}"
            if message != self._failed:
                self._failed = message
                _log(f"publishing the allocator stats failed: {message}")
            return False

    def payload(self) -> dict[str, Any] | None:
        """The document written to the file, or ``None`` while waiting for CUDA."""
        torch = sys.modules.get("torch")
        cuda = getattr(torch, "cuda", None)
        initialised = bool(cuda is not None and cuda.is_initialized())
        fw = self.frameworks
        if self.wait_for_cuda and not initialised and not (fw is not None and fw.gpu_started()):
            return None
        return {
            "schema": SCHEMA,
            "pid": self.pid,
            "start_ticks": self._ticks,
            "time": time.time(),
            "interval": self.interval,
            "step": self.steps,
            "torch": getattr(torch, "__version__", None),
            "cuda_initialised": initialised,
            "devices": self._devices(cuda) if initialised else [],
            # every framework's numbers in one schema (memfit.stats), and its settings
            "frameworks": []
            if fw is None
            else [r for f in fw.FRAMEWORKS for r in fw.read_stats(f)],
            "settings": None if fw is None else fw.settings_in_force(),
        }

    def _devices(self, cuda: Any) -> list[dict[str, Any]]:
        current = cuda.current_device()
        devices = []
        for index in range(cuda.device_count()):
            stats = cuda.memory_stats(index)
            reserved = int(stats.get("reserved_bytes.all.current", 0))
            peak = int(stats.get("reserved_bytes.all.peak", 0))
            if index != current and reserved == 0 and peak == 0:
                continue  # a device this process never used
            if index not in self._uuids:
                self._uuids[index] = _uuid(cuda.get_device_properties(index))
            devices.append(
                {
                    "index": index,
                    "uuid": self._uuids[index],
                    "allocated": int(stats.get("allocated_bytes.all.current", 0)),
                    "reserved": reserved,
                    "max_allocated": int(stats.get("allocated_bytes.all.peak", 0)),
                    "max_reserved": peak,
                    "inactive_split": stats.get("inactive_split_bytes.all.current"),
                    "num_ooms": stats.get("num_ooms"),
                    "num_alloc_retries": stats.get("num_alloc_retries"),
                }
            )
        return devices


_armed: Publisher | None = None


def active() -> Publisher | None:
    """The publisher :func:`arm_from_environment` started in this process, if running."""
    return _armed if _armed is not None and _armed.running else None


def arm_from_environment(frameworks: Any = None) -> Publisher | None:
    """Start a publisher that waits for a GPU, unless ``MEMFIT_PUBLISH=0`` (``memfit run``).

    Its thread only looks whether a framework has started a GPU until one has: a process that
    never does writes no file.
    """
    global _armed
    if os.environ.get(ENV_PUBLISH, "1") == "0":
        return None
    try:
        interval = float(os.environ.get(ENV_INTERVAL, "1.0"))
        _armed = Publisher(interval, wait_for_cuda=True, frameworks=frameworks).start()
    except (OSError, ValueError) as exc:
        _log(f"the allocator stats are not published from this process: {exc}")
        return None
    return _armed


def _log(message: str) -> None:
    try:
        sys.stderr.write(f"memfit: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed
        pass
