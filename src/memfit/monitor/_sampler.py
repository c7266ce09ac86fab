"""Take samples: NVML per GPU and per process, ``/proc`` for who, publishers for PyTorch.

``Monitor(...).sample()`` is ``nvidia-smi --query-gpu=... --query-compute-apps=...`` plus what
nvidia-smi cannot know: how much of a process's memory PyTorch has allocated, how much it only
caches, and how much lies outside PyTorch. Names, UUIDs and power limits are read once; each
sample then costs one memory, utilization, temperature and power read and two process-list
reads per GPU. ``Monitor.samples(interval)`` is ``nvidia-smi -l``: the sampling loop ``memfit
watch`` runs, for any caller; ``Monitor.from_recording`` reads a recorded driver instead.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from memfit._errors import InvalidInputError
from memfit.monitor._nvml import (
    MemoryInfo,
    NvmlBackend,
    NvmlCallError,
    ProcessKind,
    PynvmlBackend,
)
from memfit.monitor._procs import LinuxProcs, ProcReader
from memfit.monitor._published import Published, PublishedSource, RuntimeDir
from memfit.monitor._publisher import runtime_dir
from memfit.monitor._replay import Replay, load_recording
from memfit.monitor._samples import DeviceSample, ProcessSample, Sample

__all__ = ["LOST", "Monitor", "parse_devices", "sample", "samples"]

T = TypeVar("T")

# errors after which a GPU is not asked anything more in this sample
LOST = frozenset({"GpuIsLost", "Unknown", "ResetRequired", "Uninitialized"})


class _Lost(Exception):
    def __init__(self, kind: str) -> None:
        self.kind = kind


def _read(fn: Callable[..., T], *args: Any) -> tuple[T | None, str | None]:
    """Call one NVML read: ``(value, None)``, or ``(None, error kind)``; a lost GPU raises."""
    try:
        return fn(*args), None
    except NvmlCallError as exc:
        if exc.kind in LOST:
            raise _Lost(exc.kind) from None
        return None, exc.kind


def _lost_device(index: int, name: str | None, uuid: str | None, kind: str) -> DeviceSample:
    """A GPU that stopped answering: what was known of it, and why; no readings."""
    return DeviceSample(
        index=index,
        uuid=uuid,
        name=name,
        status="lost",
        error=kind,
        memory_total=None,
        memory_used=None,
        memory_reserved=None,
        utilization_gpu=None,
        utilization_memory=None,
        temperature_c=None,
        power_w=None,
        power_limit_w=None,
        processes=(),
        processes_error=None,
    )


def parse_devices(text: str) -> list[int]:
    """``"0,2"`` or ``"1"`` -> GPU indices (``--devices``)."""
    try:
        out = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        out = []
    if not out or any(i < 0 for i in out):
        raise InvalidInputError(
            f"--devices {text!r} is not understood; give GPU indices as nvidia-smi numbers "
            "them, separated by commas, e.g. --devices 0,1."
        )
    return out


def _check_schedule(interval: float, count: int | None) -> None:
    """Refuse an ``interval`` that is not > 0 seconds and a ``count`` below 1."""
    if not interval > 0:
        raise InvalidInputError(
            f"samples(interval={interval!r}) is not accepted; give seconds > 0, e.g. 1.0."
        )
    if count is not None and count < 1:
        raise InvalidInputError(
            f"samples(count={count!r}) is not accepted; give 1 or more, or None for no end."
        )


class Monitor(contextlib.AbstractContextManager["Monitor"]):
    """Samples GPUs; ``with Monitor() as m: m.sample()``, or ``for s in m.samples(1.0)``.

    ``backend`` defaults to the real driver (nvidia-ml-py; no driver or no GPU raises
    :class:`~memfit.NoGPUError`). ``devices`` selects GPUs by NVML index (as
    ``nvidia-smi -i``). ``published`` is where PyTorch processes' stats are read, by default
    the runtime directory ``memfit.publish()`` writes to.
    """

    def __init__(
        self,
        backend: NvmlBackend | None = None,
        *,
        devices: Sequence[int] | None = None,
        procs: ProcReader | None = None,
        published: PublishedSource | None = None,
    ) -> None:
        self.backend: NvmlBackend = backend if backend is not None else PynvmlBackend()
        count = self.backend.device_count()
        chosen = list(range(count)) if devices is None else list(dict.fromkeys(devices))
        bad = [i for i in chosen if not 0 <= i < count]
        if bad:
            self.backend.close()
            raise InvalidInputError(
                f"GPU {bad[0]} does not exist: this machine has {count} "
                f"(indices 0-{count - 1}, as nvidia-smi numbers them). Pick from those."
            )
        self.devices = chosen
        self.procs: ProcReader = procs if procs is not None else LinuxProcs()
        self.published: PublishedSource = (
            published if published is not None else RuntimeDir(runtime_dir(), self.procs)
        )
        self._identity: dict[int, tuple[str | None, str | None, int | None]] = {}
        self.driver_version, _ = _read(self.backend.driver_version)

    @classmethod
    def from_recording(
        cls,
        recording: str | os.PathLike[str] | dict[str, Any],
        scenario: str | None = None,
        *,
        devices: Sequence[int] | None = None,
        start: int = 0,
        loop: bool = True,
    ) -> Monitor:
        """A monitor over a recorded driver (``benchmarks/nvml_record.py``; a path or the
        loaded document) instead of the real one: NVML, ``/proc`` and the published stats
        all come from the recording's ``scenario`` (default: its first), from sample
        ``start``, going round again when ``loop`` (else staying on the last sample)."""
        doc = recording if isinstance(recording, dict) else load_recording(recording)
        replay = Replay(doc, scenario or doc["scenarios"][0]["name"], start=start, loop=loop)
        return cls(replay, devices=devices, procs=replay.procs, published=replay.published)

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release NVML."""
        self.backend.close()

    def sample(self) -> Sample:
        """Read every selected GPU now."""
        now = self.backend.now()
        begin = getattr(self.procs, "begin_sample", None)
        end = getattr(self.procs, "end_sample", None)
        if begin is not None:
            begin()
        try:
            published = self.published.read()
            devices = tuple(self._device(i, now, published) for i in self.devices)
        finally:
            if end is not None:
                end()
        forget = getattr(self.procs, "forget_except", None)
        if forget is not None:
            forget({p.pid for d in devices for p in d.processes})
        return Sample(now, self.driver_version, devices)

    def samples(self, interval: float = 1.0, count: int | None = None) -> Iterator[Sample]:
        """A sample every ``interval`` seconds (``count`` of them, or until the caller stops),
        the first at once: ``nvidia-smi -l``, the loop ``memfit watch`` runs.

        Samples keep to a fixed schedule (the n-th is due ``n * interval`` after the first), so
        the time the caller spends on each one does not add up to drift; a caller slower than
        ``interval`` gets the next sample at once.
        """
        _check_schedule(interval, count)  # at the call, not at the first next()
        return self._loop(interval, count)

    def _loop(self, interval: float, count: int | None) -> Iterator[Sample]:
        start = time.monotonic()
        n = 0
        while True:
            yield self.sample()
            n += 1
            if count is not None and n >= count:
                return
            time.sleep(max(0.0, start + n * interval - time.monotonic()))

    def _static(self, index: int) -> tuple[str | None, str | None, int | None]:
        """Name, UUID and power limit: read once (the limit changes only by nvidia-smi -pl)."""
        if index not in self._identity:
            name, _ = _read(self.backend.name, index)
            uuid, _ = _read(self.backend.uuid, index)
            limit, _ = _read(self.backend.power_limit_mw, index)
            self._identity[index] = (name, uuid, limit)
        return self._identity[index]

    def _memory(self, index: int) -> tuple[MemoryInfo | None, str | None]:
        mem, err = _read(self.backend.memory, index, 2)
        if mem is None:  # drivers before r510 have no v2
            mem, err = _read(self.backend.memory, index, 1)
        return mem, err

    def _device(self, index: int, now: float, published: dict[int, Published]) -> DeviceSample:
        try:
            name, uuid, limit = self._static(index)
            mem, mem_err = self._memory(index)
            util, _ = _read(self.backend.utilization, index)
            temp, _ = _read(self.backend.temperature, index)
            power, _ = _read(self.backend.power_mw, index)
            procs, procs_err = self._processes(index, uuid, now, published)
        except _Lost as lost:
            name, uuid, _ = self._identity.get(index, (None, None, None))
            return _lost_device(index, name, uuid, lost.kind)
        return DeviceSample(
            index=index,
            uuid=uuid,
            name=name,
            status="ok" if mem is not None else "error",
            error=None if mem is not None else mem_err,
            memory_total=None if mem is None else mem.total,
            memory_used=None if mem is None else mem.used,
            memory_reserved=None if mem is None else mem.reserved,
            utilization_gpu=None if util is None else util[0],
            utilization_memory=None if util is None else util[1],
            temperature_c=temp,
            power_w=None if power is None else power / 1000.0,
            power_limit_w=None if limit is None else limit / 1000.0,
            processes=procs,
            processes_error=procs_err,
        )

    def _processes(
        self, index: int, uuid: str | None, now: float, published: dict[int, Published]
    ) -> tuple[tuple[ProcessSample, ...], str | None]:
        compute, err = _read(self.backend.processes, index, "compute")
        graphics, _ = _read(self.backend.processes, index, "graphics")
        seen: dict[int, ProcessSample] = {}
        lists: tuple[tuple[ProcessKind, list[tuple[int, int | None]]], ...] = (
            ("compute", compute or []),
            ("graphics", graphics or []),
        )
        for kind, listed in lists:
            for pid, used in listed:
                if pid not in seen:
                    seen[pid] = self._process(pid, index, uuid, kind, used, now, published)
        return tuple(seen.values()), err

    def _process(
        self,
        pid: int,
        index: int,
        uuid: str | None,
        kind: ProcessKind,
        used: int | None,
        now: float,
        published: dict[int, Published],
    ) -> ProcessSample:
        info = self.procs.read(pid)  # None: it exited between NVML's list and now
        pub = published.get(pid)
        return ProcessSample(
            pid=pid,
            gpu=index,
            kind=kind,
            used_memory=used,
            user=None if info is None else info.user,
            command=None if info is None else info.command,
            container=None if info is None else info.container,
            pod=None if info is None else info.pod,
            torch=None if pub is None else pub.torch_stats(uuid, index, now),
            cuda_initialised=None if pub is None else pub.cuda_initialised,
            frameworks=() if pub is None else pub.framework_stats(uuid, index),
        )


def sample(devices: Sequence[int] | None = None) -> Sample:
    """One sample of this machine's GPUs through the driver (``nvidia-smi -q`` in one call)."""
    with Monitor(devices=devices) as monitor:
        return monitor.sample()


def samples(
    interval: float = 1.0, count: int | None = None, devices: Sequence[int] | None = None
) -> Iterator[Sample]:
    """This machine's GPUs through the driver every ``interval`` seconds (``nvidia-smi -l``);
    see :meth:`Monitor.samples`. The driver is released when the loop ends or is closed."""
    _check_schedule(interval, count)  # at the call, not at the first next()
    return _samples(interval, count, devices)


def _samples(interval: float, count: int | None, devices: Sequence[int] | None) -> Iterator[Sample]:
    with Monitor(devices=devices) as monitor:
        yield from monitor.samples(interval, count)
