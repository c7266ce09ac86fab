"""Read what publishers wrote (``memfit.publish()``), and forget what dead processes left.

A file is believed only while its process lives: its pid must exist and have started when the
file says (``start_ticks``), or the pid was reused by another program. Files of dead processes
are removed (a process killed with SIGKILL cannot remove its own).
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from memfit.monitor._procs import ProcReader
from memfit.monitor._publisher import SCHEMA
from memfit.monitor._samples import TorchStats
from memfit.monitor._stats import MemoryStats, memory_stats_from_dict

__all__ = ["Published", "PublishedSource", "RuntimeDir", "published_from_json"]


@dataclass(frozen=True, slots=True)
class Published:
    """One process's published document (``memfit.publish/1``)."""

    pid: int
    start_ticks: int | None
    time: float
    cuda_initialised: bool
    step: int | None
    devices: tuple[dict[str, Any], ...]
    frameworks: tuple[MemoryStats, ...] = ()
    settings: dict[str, Any] | None = None  # what the process runs with (memfit doctor)

    def framework_stats(self, uuid: str | None, index: int) -> tuple[MemoryStats, ...]:
        """Every framework's numbers on the GPU with NVML ``uuid`` (or, without, ``index``)."""
        return tuple(
            row
            for row in self.frameworks
            if row.kind == "gpu" and _same_gpu(row.uuid, row.index, uuid, index)
        )

    def torch_stats(self, uuid: str | None, index: int, now: float) -> TorchStats | None:
        """The stats for the GPU with NVML ``uuid`` (or, without UUIDs, NVML ``index``)."""
        for dev in self.devices:
            if _same_gpu(dev.get("uuid"), dev["index"], uuid, index):
                return TorchStats(
                    allocated=int(dev["allocated"]),
                    reserved=int(dev["reserved"]),
                    max_allocated=int(dev["max_allocated"]),
                    max_reserved=int(dev["max_reserved"]),
                    inactive_split=_opt_int(dev.get("inactive_split")),
                    num_ooms=_opt_int(dev.get("num_ooms")),
                    num_alloc_retries=_opt_int(dev.get("num_alloc_retries")),
                    step=self.step,
                    age=max(0.0, now - self.time),
                )
        return None


def _same_gpu(uuid: str | None, index: int | None, nvml_uuid: str | None, nvml_index: int) -> bool:
    """A published device is NVML's GPU: by UUID where both have one, else by index."""
    return uuid == nvml_uuid if uuid and nvml_uuid else index == nvml_index


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def published_from_json(doc: Any) -> Published | None:
    """Parse one publisher document; ``None`` if it is not one."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        return None
    try:
        return Published(
            pid=int(doc["pid"]),
            start_ticks=_opt_int(doc.get("start_ticks")),
            time=float(doc["time"]),
            cuda_initialised=bool(doc.get("cuda_initialised")),
            step=_opt_int(doc.get("step")),
            devices=tuple(d for d in doc.get("devices", []) if isinstance(d, dict)),
            frameworks=tuple(
                row
                for row in (
                    memory_stats_from_dict(d)
                    for d in doc.get("frameworks") or []
                    if isinstance(d, dict)
                )
                if row is not None
            ),
            settings=doc.get("settings") if isinstance(doc.get("settings"), dict) else None,
        )
    except (KeyError, TypeError, ValueError):
        return None


class PublishedSource(Protocol):
    """Where the sampler finds published stats, by pid."""

    def read(self) -> dict[int, Published]: ...


class RuntimeDir:
    """:class:`PublishedSource` over a runtime directory; ``procs`` says who is alive."""

    def __init__(self, directory: str | os.PathLike[str], procs: ProcReader) -> None:
        self.directory = Path(directory)
        self.procs = procs
        # parsed files by name, with the (inode, mtime) they were parsed at: a file is parsed
        # again only when its publisher has replaced it
        self._parsed: dict[str, tuple[tuple[int, int], Published | None]] = {}

    def read(self) -> dict[int, Published]:
        found: dict[int, Published] = {}
        parsed: dict[str, tuple[tuple[int, int], Published | None]] = {}
        try:
            entries = [e for e in os.scandir(self.directory) if e.name.endswith(".json")]
        except OSError:
            return found
        for entry in entries:
            try:
                info = entry.stat()
                key = (info.st_ino, info.st_mtime_ns)
                cached = self._parsed.get(entry.name)
                if cached is not None and cached[0] == key:
                    pub = cached[1]
                else:
                    with open(entry.path, encoding="utf-8") as f:
                        pub = published_from_json(json.load(f))
            except (OSError, ValueError):
                continue  # removed while we listed it, or not ours
            parsed[entry.name] = (key, pub)
            if pub is not None and self._alive(pub, entry.path):
                found[pub.pid] = pub
        self._parsed = parsed
        return found

    def _alive(self, pub: Published, path: str) -> bool:
        """Whether the publisher still runs; the file of one that does not is removed."""
        info = self.procs.read(pub.pid)
        gone = info is None or (
            pub.start_ticks is not None
            and info.start_ticks is not None
            and pub.start_ticks != info.start_ticks
        )
        if gone:
            with contextlib.suppress(OSError):
                os.unlink(path)
        return not gone
