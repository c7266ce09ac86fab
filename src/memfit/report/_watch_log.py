"""Log monitor samples for later: CSV rows or JSON lines, appended (``memfit watch --log``).

CSV has one row per GPU (``kind=gpu``) and one per process (``kind=process``) per sample, with a
fixed set of columns, bytes as integers and an empty cell where a value is not available, so a
spreadsheet or pandas reads it as is. JSON lines hold one whole sample per line (the
``memfit.sample/1`` document of ``memfit watch --json``).
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
from pathlib import Path
from typing import Any, TextIO

from memfit._errors import InvalidInputError
from memfit.monitor import ProcessSample, Sample

__all__ = ["LOG_COLUMNS", "LOG_SUFFIXES", "SampleLog", "log_rows"]

LOG_SUFFIXES = (".csv", ".jsonl", ".ndjson")

LOG_COLUMNS = (
    "time",
    "kind",
    "gpu",
    "uuid",
    "name",
    "status",
    "memory_used",
    "memory_total",
    "utilization_gpu",
    "other",
    "pid",
    "user",
    "command",
    "container",
    "pod",
    "used_memory",
    "torch_allocated",
    "torch_reserved",
    "torch_max_allocated",
    "torch_max_reserved",
    "non_torch",
    "framework",
    "in_use",
    "pool",
    "peak",
    "limit",
    "outside_pool",
)


def log_rows(sample: Sample) -> list[dict[str, Any]]:
    """The CSV rows of one sample (``None`` for a value not available)."""
    rows: list[dict[str, Any]] = []
    for dev in sample.devices:
        base = {"time": sample.time, "gpu": dev.index, "uuid": dev.uuid, "name": dev.name}
        rows.append(
            {
                **base,
                "kind": "gpu",
                "status": dev.status,
                "memory_used": dev.memory_used,
                "memory_total": dev.memory_total,
                "utilization_gpu": dev.utilization_gpu,
                "other": dev.other,
            }
        )
        for p in dev.processes:
            t = p.torch
            rows.append(
                {
                    **base,
                    "kind": "process",
                    "pid": p.pid,
                    "user": p.user,
                    "command": p.command,
                    "container": p.container,
                    "pod": p.pod,
                    "used_memory": p.used_memory,
                    "torch_allocated": None if t is None else t.allocated,
                    "torch_reserved": None if t is None else t.reserved,
                    "torch_max_allocated": None if t is None else t.max_allocated,
                    "torch_max_reserved": None if t is None else t.max_reserved,
                    "non_torch": p.non_torch,
                    **_framework_cells(p),
                }
            )
    return rows


def _framework_cells(p: ProcessSample) -> dict[str, Any]:
    row = p.main_stats
    return {
        "framework": None if row is None else row.framework,
        "in_use": None if row is None else row.in_use,
        "pool": None if row is None else row.pool,
        "peak": None if row is None else row.peak,
        "limit": None if row is None else row.limit,
        "outside_pool": p.outside_pool,
    }


class SampleLog(contextlib.AbstractContextManager["SampleLog"]):
    """Appends samples to ``path`` (``.csv``, ``.jsonl`` or ``.ndjson``); a new or empty CSV
    file gets the header first. Each sample is flushed, so an interrupted watch keeps its log."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        suffix = self.path.suffix.lower()
        if suffix not in LOG_SUFFIXES:
            raise InvalidInputError(
                f"--log {self.path}: the suffix picks the format; give a file ending in "
                f"{', '.join(LOG_SUFFIXES)}."
            )
        self.csv = suffix == ".csv"
        self._failed = False  # a write failed: closing fails too, and says nothing new
        try:
            self._file: TextIO = self.path.open("a", newline="", encoding="utf-8")
        except OSError as exc:
            raise InvalidInputError(
                f"--log {self.path} cannot be written ({exc.strerror}). Give a path in a "
                "directory you can write to."
            ) from None
        self._writer = csv.DictWriter(self._file, LOG_COLUMNS) if self.csv else None
        if self._writer is not None and self._file.tell() == 0:
            self._writer.writeheader()

    def write(self, sample: Sample) -> None:
        """Append ``sample``; a write that fails (a full disk) names the log and the reason."""
        try:
            if self._writer is not None:
                self._writer.writerows(log_rows(sample))
            else:
                self._file.write(json.dumps(sample.to_dict(), separators=(",", ":")) + "\n")
            self._file.flush()
        except OSError as exc:
            self._failed = True
            raise InvalidInputError(
                f"--log {self.path}: a sample could not be written ({exc.strerror or exc}); the "
                "samples before it are in the file. Give a path where there is room (--log "
                "on another disk), or free some."
            ) from exc

    def close(self) -> None:
        try:
            self._file.close()
        except OSError:  # what a failed write left in the buffer: that write said so
            if not self._failed:
                raise

    def __exit__(self, *exc: object) -> None:
        self.close()
