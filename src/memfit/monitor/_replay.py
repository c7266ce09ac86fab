"""Play back a recording of a real driver (``benchmarks/nvml_record.py``) as if it were live.

The recording holds, per scenario and per sample, every NVML answer the monitor asks for
(values, or the error the driver gave, such as ``NotSupported``), what ``/proc`` said of each
GPU process, and the allocator stats each PyTorch process wrote about itself. A
:class:`Replay` answers the sampler's three questions from it (NVML, ``/proc``, published
stats), so views and the exporter are tested, and can be shown, on real readings:
``memfit watch --once --replay nvml-h200.json.gz --scenario train``.
"""

from __future__ import annotations

import gzip
import json
import os
from typing import Any, Literal

from memfit._errors import InvalidInputError
from memfit.monitor._nvml import MemoryInfo, NvmlCallError, ProcessKind, error_kind
from memfit.monitor._procs import ProcInfo, command_line, parse_cgroup
from memfit.monitor._published import Published, published_from_json
from memfit.monitor._publisher import SCHEMA

__all__ = ["Replay", "load_recording"]


def load_recording(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a recording (``.json`` or ``.json.gz``)."""
    opener: Any = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            doc: dict[str, Any] = json.load(f)
    except (OSError, ValueError) as exc:
        raise InvalidInputError(
            f"The recording {path} could not be read ({exc}). Give a file written by "
            "benchmarks/nvml_record.py (.json.gz)."
        ) from None
    if not isinstance(doc, dict) or "scenarios" not in doc:
        raise InvalidInputError(
            f"{path} is not a recording of benchmarks/nvml_record.py (no 'scenarios')."
        )
    return doc


class Replay:
    """One scenario of a recording; each :meth:`now` moves to the next sample (looping when
    ``loop``, else staying on the last), starting at sample ``start``."""

    def __init__(
        self, document: dict[str, Any], scenario: str, *, start: int = 0, loop: bool = True
    ) -> None:
        names = [s["name"] for s in document["scenarios"]]
        if scenario not in names:
            raise InvalidInputError(
                f"The recording has no scenario {scenario!r}; it has {', '.join(names)}."
            )
        self.meta: dict[str, Any] = document.get("meta", {})
        self.samples: list[dict[str, Any]] = document["scenarios"][names.index(scenario)]["samples"]
        self.loop = loop
        self.position = start - 1
        self.procs = _ReplayProcs(self)
        self.published = _ReplayPublished(self)

    @property
    def current(self) -> dict[str, Any]:
        return self.samples[max(0, self.position) % len(self.samples)]

    # --- NvmlBackend ---------------------------------------------------------------------

    def now(self) -> float:
        if self.loop or self.position < len(self.samples) - 1:
            self.position += 1
        return float(self.current["time"])

    def _answer(self, index: int | None, key: str) -> Any:
        if index is None:
            entry = self.meta.get(key, {"error": "NVMLError_NotSupported"})
        else:
            devices = self.current["devices"]
            if index >= len(devices):
                raise NvmlCallError("GpuIsLost", "the GPU is missing from this sample")
            entry = devices[index].get(key, {"error": "NVMLError_NotSupported"})
        if "error" in entry:
            raise NvmlCallError(error_kind(entry["error"]), entry.get("message", ""))
        return entry["value"]

    def driver_version(self) -> str:
        return str(self._answer(None, "driver"))

    def device_count(self) -> int:
        return int(self.meta.get("device_count", len(self.samples[0]["devices"])))

    def name(self, index: int) -> str:
        return str(self._answer(index, "name"))

    def uuid(self, index: int) -> str:
        return str(self._answer(index, "uuid"))

    def memory(self, index: int, version: Literal[1, 2]) -> MemoryInfo:
        m = self._answer(index, f"memory_v{version}")
        reserved = m.get("reserved") if version == 2 else None
        return MemoryInfo(int(m["total"]), int(m["used"]), int(m["free"]), reserved)

    def utilization(self, index: int) -> tuple[int, int]:
        u = self._answer(index, "utilization")
        return int(u["gpu"]), int(u["memory"])

    def temperature(self, index: int) -> int:
        return int(self._answer(index, "temperature"))

    def power_mw(self, index: int) -> int:
        return int(self._answer(index, "power_mw"))

    def power_limit_mw(self, index: int) -> int:
        return int(self._answer(index, "power_limit_mw"))

    def processes(self, index: int, kind: ProcessKind) -> list[tuple[int, int | None]]:
        listed = self._answer(index, f"{kind}_processes") or []
        out = []
        for p in listed:
            used = p.get("usedGpuMemory")
            out.append((int(p["pid"]), None if used is None else int(used)))
        return out

    def close(self) -> None:
        pass

    # --- what the workload processes wrote about themselves, as publisher documents -----

    def publisher_documents(self) -> list[dict[str, Any]]:
        """The recorded framework stats of the current sample, as ``memfit.publish`` writes
        them (the recorder wrote its own format; the numbers are the recorded ones)."""
        uuids = {}
        for i, dev in enumerate(self.current["devices"]):
            uuids[i] = dev.get("uuid", {}).get("value")
        ticks = {p["pid"]: p.get("create_time_ticks") for p in self.current.get("procs", [])}
        docs = []
        for stats in self.current.get("framework", []):
            docs.append(
                {
                    "schema": SCHEMA,
                    "pid": stats["pid"],
                    "start_ticks": ticks.get(stats["pid"]),
                    "time": stats["time"],
                    "interval": None,
                    "step": stats.get("step"),
                    "torch": stats.get("torch"),
                    "cuda_initialised": True,
                    "devices": [
                        {
                            "index": stats["device"],
                            "uuid": uuids.get(stats["device"]),
                            **{
                                k: stats[k]
                                for k in ("allocated", "reserved", "max_allocated", "max_reserved")
                            },
                        }
                    ],
                }
            )
        return docs


class _ReplayProcs:
    """``/proc`` as it was recorded beside the current sample."""

    def __init__(self, replay: Replay) -> None:
        self._replay = replay

    def read(self, pid: int) -> ProcInfo | None:
        for p in self._replay.current.get("procs", []):
            if p["pid"] == pid:
                if "error" in p:
                    return None  # the process had exited when it was read
                container, pod = parse_cgroup(p.get("cgroup", ""))
                command = command_line(p.get("cmdline", []))
                ticks = p.get("create_time_ticks")
                return ProcInfo(pid, p.get("uid"), p.get("user"), command, container, pod, ticks)
        return None


class _ReplayPublished:
    """The recorded framework stats of the current sample, as published stats."""

    def __init__(self, replay: Replay) -> None:
        self._replay = replay

    def read(self) -> dict[int, Published]:
        found = {}
        for doc in self._replay.publisher_documents():
            pub = published_from_json(doc)
            if pub is not None:
                found[pub.pid] = pub
        return found
