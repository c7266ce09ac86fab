"""``memfit doctor``'s look at the running processes: the memory settings each runs with.

Two sources, best first: what a process published (``memfit.publish()`` or ``memfit run``):
the variables it started with, the frameworks it started and what they hold (JAX's pool beside
what it uses); else, for a process on a GPU that does not publish, the memory variables of its
environment (``/proc/PID/environ``, readable for one's own processes). The advice names the
process and what to change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from memfit._units import format_bytes
from memfit.monitor._advice import Advice
from memfit.monitor._framework_numbers import ENV_NAMES
from memfit.monitor._published import Published
from memfit.monitor._stats import MemoryStats

__all__ = ["ProcessSettings", "process_advice", "process_settings", "read_environ"]


@dataclass(frozen=True)
class ProcessSettings:
    """The memory settings one running process has, and where they were read."""

    pid: int
    gpus: list[int]  # NVML indices it was seen on (empty: seen only through its publisher)
    source: Literal["published", "environment"]
    environment: dict[str, str]  # the memory variables set in it
    started: list[str] = field(default_factory=list)  # frameworks started (published only)
    stats: list[MemoryStats] = field(default_factory=list)  # their numbers (published only)
    runtime: dict[str, Any] = field(default_factory=dict)  # what started runtimes say


def read_environ(pid: int, proc: str = "/proc") -> dict[str, str] | None:
    """The memory variables of process ``pid``'s environment; ``None`` where it cannot be read
    (another user's process, or it exited)."""
    try:
        with open(f"{proc}/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    out = {}
    for item in raw.split(b"\0"):
        name, eq, value = item.partition(b"=")
        if eq and name.decode(errors="replace") in ENV_NAMES:
            out[name.decode()] = value.decode(errors="replace")
    return out


def process_settings(
    on_gpus: Iterable[tuple[int, int]],
    published: dict[int, Published],
    environ_of: Callable[[int], dict[str, str] | None] | None = None,
) -> list[ProcessSettings]:
    """The settings of every process on a GPU (``(gpu index, pid)`` pairs) and of every
    publisher, by pid (``environ_of``: how an environment is read, ``read_environ``)."""
    environ_of = environ_of or read_environ
    gpus: dict[int, list[int]] = {}
    for index, pid in on_gpus:
        gpus.setdefault(pid, []).append(index)
    out = []
    for pid in sorted(set(gpus) | set(published)):
        pub = published.get(pid)
        if pub is not None and pub.settings is not None:
            settings = pub.settings
            env = {k: v for k, v in (settings.get("environment") or {}).items() if v is not None}
            started = [f for f, v in settings.items() if isinstance(v, dict) and v.get("started")]
            runtime = {f: v for f, v in settings.items() if f != "environment"}
            out.append(
                ProcessSettings(
                    pid, gpus.get(pid, []), "published", env, started, list(pub.frameworks), runtime
                )
            )
            continue
        env_read = environ_of(pid)
        if env_read is not None:
            out.append(ProcessSettings(pid, gpus.get(pid, []), "environment", env_read))
    return out


def process_advice(processes: list[ProcessSettings]) -> list[Advice]:
    """What to change in the running processes: JAX or TensorFlow holding a GPU's memory up
    front, most of it unused."""
    out = []
    for p in processes:
        for row in p.stats:
            if row.kind != "gpu" or row.framework not in ("jax", "tensorflow"):
                continue
            advice = _held_not_used(p, row)
            if advice is not None:
                out.append(advice)
    return out


def _held_not_used(p: ProcessSettings, row: MemoryStats) -> Advice | None:
    held = row.pool if row.pool is not None else row.limit
    if held is None or row.in_use is None or held < 2 * max(row.in_use, 1 << 30):
        return None
    if row.framework == "jax":
        growth = p.environment.get("XLA_PYTHON_CLIENT_PREALLOCATE", "").lower() == "false"
        change = "restart it with XLA_PYTHON_CLIENT_PREALLOCATE=false (memfit run --growth)"
    else:
        growth = p.environment.get("TF_FORCE_GPU_ALLOW_GROWTH", "").lower() == "true"
        change = "restart it with TF_FORCE_GPU_ALLOW_GROWTH=true (memfit run --growth)"
    if growth:
        change = "give it a limit (memfit run --limit) or restart it to return the memory"
    return Advice(
        "warning",
        f"pid {p.pid} ({row.framework}, GPU {row.index if row.index is not None else '?'})",
        change,
        f"it holds {format_bytes(held)} of the GPU and uses {format_bytes(row.in_use)} "
        f"(peak {format_bytes(row.peak) if row.peak is not None else 'unknown'}): the rest "
        "is kept from every other process",
    )
