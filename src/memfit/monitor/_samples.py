"""What one look at the GPUs saw: plain frozen dataclasses, sizes in bytes.

A value NVML or the process could not give is ``None`` (rendered ``N/A``), never a magic
number: a driver that lacks a field, a GPU that fell off the bus, a process that exited while
it was being read. The derived numbers (``non_torch``, ``other``) are ``None`` too whenever one
of their parts is unknown, so a view never shows a difference of a known and an unknown value.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from memfit.monitor._stats import MemoryStats

__all__ = ["SCHEMA", "DeviceSample", "DeviceStatus", "ProcessSample", "Sample", "TorchStats"]

SCHEMA = "memfit.sample/1"

DeviceStatus = Literal["ok", "lost", "error"]


@dataclass(frozen=True, slots=True)
class TorchStats:
    """What a PyTorch process published about itself on one device (``memfit.publish()``).

    ``allocated``/``reserved`` are ``torch.cuda.memory_allocated()``/``memory_reserved()``;
    ``max_*`` their peaks since start (or the last ``reset_peak_memory_stats``);
    ``inactive_split`` is cached memory in split blocks (fragmentation); ``age`` is how old the
    published numbers were when the sample was taken, in seconds.
    """

    allocated: int
    reserved: int
    max_allocated: int
    max_reserved: int
    inactive_split: int | None
    num_ooms: int | None
    num_alloc_retries: int | None
    step: int | None
    age: float


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """One process on one GPU, as ``nvidia-smi --query-compute-apps=pid,used_memory`` lists it.

    ``used_memory`` is NVML's figure for the process (its CUDA context, the caching allocator's
    reservations and every library's own allocations). ``torch`` is set when the process
    publishes its allocator stats; ``cuda_initialised`` is ``False`` for a process that
    published before it initialised CUDA, ``None`` for one that does not publish.
    ``container``/``pod`` come from the process's cgroup, when it reveals them.
    """

    pid: int
    gpu: int
    kind: Literal["compute", "graphics"]
    used_memory: int | None
    user: str | None
    command: str | None
    container: str | None
    pod: str | None
    torch: TorchStats | None
    cuda_initialised: bool | None
    frameworks: tuple[MemoryStats, ...] = ()

    @property
    def main_stats(self) -> MemoryStats | None:
        """The framework numbers to show for the process: torch's where it has them, else
        the first framework's (a process rarely runs two on one GPU)."""
        rows = sorted(self.frameworks, key=lambda r: r.framework != "torch")
        return rows[0] if rows else None

    @property
    def outside_pool(self) -> int | None:
        """NVML's used memory minus the framework's pool (``non_torch`` for any framework)."""
        row = self.main_stats
        if self.used_memory is None or row is None or row.pool is None:
            return self.non_torch
        return self.used_memory - row.pool

    @property
    def non_torch(self) -> int | None:
        """Memory of the process outside PyTorch's caching allocator: NVML's used memory minus
        ``reserved`` (CUDA context, cuBLAS/cuDNN handles, NCCL buffers, other libraries)."""
        if self.used_memory is None or self.torch is None:
            return None
        return self.used_memory - self.torch.reserved


@dataclass(frozen=True, slots=True)
class DeviceSample:
    """One GPU, as ``nvidia-smi --query-gpu=index,uuid,name,memory.used,memory.total,
    utilization.gpu,temperature.gpu,power.draw`` shows it.

    ``memory_used`` excludes the driver's own ``memory_reserved`` where the driver reports
    them apart (NVML memory info v2, as nvidia-smi does). ``status`` is ``"lost"`` when the GPU
    stopped answering (fallen off the bus, or an unknown NVML error) and ``"error"`` when a
    read failed otherwise; ``error`` says why. ``processes_error`` says why the process list is
    missing (e.g. ``NoPermission``).
    """

    index: int
    uuid: str | None
    name: str | None
    status: DeviceStatus
    error: str | None
    memory_total: int | None
    memory_used: int | None
    memory_reserved: int | None
    utilization_gpu: int | None
    utilization_memory: int | None
    temperature_c: int | None
    power_w: float | None
    power_limit_w: float | None
    processes: tuple[ProcessSample, ...]
    processes_error: str | None

    @property
    def processes_memory(self) -> int | None:
        """The sum of the processes' used memory, ``None`` if any is unknown."""
        total = 0
        for proc in self.processes:
            if proc.used_memory is None:
                return None
            total += proc.used_memory
        return total

    @property
    def other(self) -> int | None:
        """Used memory no listed process accounts for: processes in other containers or PID
        namespaces, the display, or memory NVML attributes to no process."""
        listed = self.processes_memory
        if self.memory_used is None or listed is None or self.processes_error is not None:
            return None
        return self.memory_used - listed


@dataclass(frozen=True, slots=True)
class Sample:
    """Every selected GPU at one moment (``time``, seconds since the epoch)."""

    time: float
    driver_version: str | None
    devices: tuple[DeviceSample, ...]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``schema`` ``memfit.sample/1``), with the derived numbers."""
        devices = []
        for dev in self.devices:
            data = asdict(dev)
            data["other"] = dev.other
            data["processes"] = [
                {**asdict(proc), "non_torch": proc.non_torch, "outside_pool": proc.outside_pool}
                for proc in dev.processes
            ]
            devices.append(data)
        return {
            "schema": SCHEMA,
            "time": self.time,
            "driver_version": self.driver_version,
            "devices": devices,
        }
