"""The handful of NVML calls the monitor makes, behind a small interface.

:class:`NvmlBackend` is what the sampler needs; :class:`PynvmlBackend` answers it from the
driver through nvidia-ml-py (a dependency of memfit), and ``memfit.monitor.Replay`` answers it
from a recording of a real driver, errors included, so views are tested on real readings. A call
the driver cannot answer raises :class:`NvmlCallError` with NVML's error name (``NotSupported``,
``GpuIsLost``, ``NoPermission``...); the sampler turns it into ``None`` or a device status.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from memfit._errors import MemfitError, MissingExtraError, NoGPUError

__all__ = [
    "MemoryInfo",
    "NvmlBackend",
    "NvmlCallError",
    "ProcessKind",
    "PynvmlBackend",
    "error_kind",
]

ProcessKind = Literal["compute", "graphics"]


class NvmlCallError(MemfitError):
    """One NVML call failed; ``kind`` is NVML's error name without ``NVMLError_``.

    The sampler catches it: a sample shows a value the driver could not give as ``None`` and a
    GPU that stopped answering as lost, so it reaches callers only of an :class:`NvmlBackend`.
    """

    def __init__(self, kind: str, message: str = "") -> None:
        super().__init__(f"{kind}: {message}" if message else kind)
        self.kind = kind


def error_kind(name: str) -> str:
    """``NVMLError_NotSupported`` -> ``NotSupported`` (the class names nvidia-ml-py uses)."""
    return name.removeprefix("NVMLError_") or "Unknown"


@dataclass(frozen=True, slots=True)
class MemoryInfo:
    """``nvmlDeviceGetMemoryInfo``: v2 reports the driver's ``reserved`` apart from ``used``."""

    total: int
    used: int
    free: int
    reserved: int | None


class NvmlBackend(Protocol):
    """The NVML queries the sampler makes; each may raise :class:`NvmlCallError`."""

    def now(self) -> float:
        """The time of the sample about to be taken (seconds since the epoch)."""

    def driver_version(self) -> str: ...

    def device_count(self) -> int: ...

    def name(self, index: int) -> str: ...

    def uuid(self, index: int) -> str: ...

    def memory(self, index: int, version: Literal[1, 2]) -> MemoryInfo: ...

    def utilization(self, index: int) -> tuple[int, int]:
        """``(gpu, memory)`` busy percentages over the driver's last sample period."""

    def temperature(self, index: int) -> int: ...

    def power_mw(self, index: int) -> int: ...

    def power_limit_mw(self, index: int) -> int: ...

    def processes(self, index: int, kind: ProcessKind) -> list[tuple[int, int | None]]:
        """``(pid, used bytes or None)`` of the compute or graphics processes on the GPU."""

    def close(self) -> None: ...


_NO_DRIVER_FIX = (
    "Install the NVIDIA driver (nvidia-smi must work), or run memfit on the GPU machine; "
    "in a container, start it with the GPU runtime (docker run --gpus all ...)."
)


class PynvmlBackend:
    """The real driver, through nvidia-ml-py. Opening it with no driver or no GPU raises
    :class:`~memfit.NoGPUError` (the CLI's exit code 2)."""

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError:
            # a core dependency, so only a broken install lacks it; the extra installs it too
            raise MissingExtraError("nvidia-ml-py", "memfit watch", "nvml") from None
        self._nv: Any = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            kind = error_kind(type(exc).__name__)
            if kind in ("LibraryNotFound", "DriverNotLoaded"):
                raise NoGPUError(
                    f"No NVIDIA driver found (NVML could not be loaded: {exc}). {_NO_DRIVER_FIX}"
                ) from None
            raise NoGPUError(
                f"NVML could not start ({kind}: {exc}). Check that nvidia-smi works for this "
                "user; NoPermission means the device files /dev/nvidia* are not readable."
            ) from None
        self._handles: list[Any] = []
        try:
            for index in range(int(pynvml.nvmlDeviceGetCount())):
                try:
                    self._handles.append(pynvml.nvmlDeviceGetHandleByIndex(index))
                except pynvml.NVMLError as exc:  # a GPU that is lost already: keep its slot
                    self._handles.append(NvmlCallError(error_kind(type(exc).__name__), str(exc)))
        except pynvml.NVMLError as exc:
            pynvml.nvmlShutdown()
            raise NoGPUError(f"NVML could not count the GPUs ({exc}). {_NO_DRIVER_FIX}") from None
        if not self._handles:
            pynvml.nvmlShutdown()
            raise NoGPUError(
                "The NVIDIA driver is loaded but shows no GPU (nvmlDeviceGetCount() = 0). "
                "Check CUDA_VISIBLE_DEVICES is not the cause (NVML ignores it) and that "
                "nvidia-smi lists a GPU."
            )

    def _call(self, index: int | None, fn: str, *args: Any) -> Any:
        nv = self._nv
        try:
            if index is None:
                return getattr(nv, fn)(*args)
            handle = self._handles[index]
            if isinstance(handle, NvmlCallError):
                raise handle
            return getattr(nv, fn)(handle, *args)
        except nv.NVMLError as exc:
            raise NvmlCallError(error_kind(type(exc).__name__), str(exc)) from None

    def now(self) -> float:
        return time.time()

    def driver_version(self) -> str:
        return _text(self._call(None, "nvmlSystemGetDriverVersion"))

    def device_count(self) -> int:
        return len(self._handles)

    def name(self, index: int) -> str:
        return _text(self._call(index, "nvmlDeviceGetName"))

    def uuid(self, index: int) -> str:
        return _text(self._call(index, "nvmlDeviceGetUUID"))

    def memory(self, index: int, version: Literal[1, 2]) -> MemoryInfo:
        if version == 1:
            m = self._call(index, "nvmlDeviceGetMemoryInfo")
            return MemoryInfo(int(m.total), int(m.used), int(m.free), None)
        m = self._call(index, "nvmlDeviceGetMemoryInfo", self._nv.nvmlMemory_v2)
        return MemoryInfo(int(m.total), int(m.used), int(m.free), int(m.reserved))

    def utilization(self, index: int) -> tuple[int, int]:
        u = self._call(index, "nvmlDeviceGetUtilizationRates")
        return int(u.gpu), int(u.memory)

    def temperature(self, index: int) -> int:
        return int(self._call(index, "nvmlDeviceGetTemperature", self._nv.NVML_TEMPERATURE_GPU))

    def power_mw(self, index: int) -> int:
        return int(self._call(index, "nvmlDeviceGetPowerUsage"))

    def power_limit_mw(self, index: int) -> int:
        return int(self._call(index, "nvmlDeviceGetEnforcedPowerLimit"))

    def processes(self, index: int, kind: ProcessKind) -> list[tuple[int, int | None]]:
        fn = (
            "nvmlDeviceGetComputeRunningProcesses"
            if kind == "compute"
            else "nvmlDeviceGetGraphicsRunningProcesses"
        )
        out = []
        for proc in self._call(index, fn):
            used = proc.usedGpuMemory
            out.append((int(proc.pid), None if used is None else int(used)))
        return out

    def cuda_driver_version(self) -> int:
        """``nvmlSystemGetCudaDriverVersion``: e.g. 13000 for CUDA 13.0 (memfit doctor)."""
        return int(self._call(None, "nvmlSystemGetCudaDriverVersion"))

    def mig_mode(self, index: int) -> bool:
        """Whether MIG mode is on (memfit doctor); NotSupported on GPUs without MIG."""
        current, _pending = self._call(index, "nvmlDeviceGetMigMode")
        return bool(current)

    def close(self) -> None:
        with contextlib.suppress(self._nv.NVMLError):
            self._nv.nvmlShutdown()


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
