"""Live GPU memory: NVML per GPU and per process, with the frameworks' own numbers beside;
and the frameworks' memory settings (``memfit.configure``, ``memfit doctor``).

``nvidia-smi`` shows how much memory a process holds; PyTorch knows how much of it is
allocated and how much is only cached; neither shows the rest (CUDA context, cuBLAS/cuDNN,
NCCL). ``memfit.publish()`` in a training script (or ``memfit run``) writes the allocator's
stats to a small file; :class:`Monitor` joins them with NVML's readings into a :class:`Sample`
that ``memfit watch`` renders and ``memfit export`` serves to Prometheus.

::

    import memfit
    publisher = memfit.publish(interval=1.0)       # in the training process

    from memfit.monitor import sample, samples     # anywhere on the machine
    for gpu in sample().devices:
        for p in gpu.processes:
            print(p.pid, p.used_memory, p.torch and p.torch.reserved, p.non_torch)
    for s in samples(interval=1.0, count=10):      # nvidia-smi -l 1, as memfit watch runs it
        print(s.time, [gpu.memory_used for gpu in s.devices])

``Monitor(...).samples(interval)`` is the same loop on a monitor of one's own (chosen GPUs, a
recorded driver through ``Monitor.from_recording``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from memfit._errors import InvalidInputError
from memfit.monitor import _framework_numbers, _frameworks, _publisher
from memfit.monitor._advice import Advice
from memfit.monitor._configure import (
    ALLOCATORS,
    Configuration,
    ConfigurationTooLateError,
    ConfigurationWarning,
    SettingAction,
    configure,
    resolve_frameworks,
)
from memfit.monitor._doctor import Diagnosis, FrameworkInfo, GpuInfo, diagnose
from memfit.monitor._doctor_procs import ProcessSettings
from memfit.monitor._exporter import METRICS, Exporter, SampleCollector, start_exporter
from memfit.monitor._framework_numbers import FRAMEWORKS
from memfit.monitor._nvml import MemoryInfo, NvmlBackend, NvmlCallError, PynvmlBackend
from memfit.monitor._procs import LinuxProcs, ProcInfo, ProcReader, parse_cgroup
from memfit.monitor._published import Published, PublishedSource, RuntimeDir
from memfit.monitor._publisher import Publisher, runtime_dir
from memfit.monitor._replay import Replay, load_recording
from memfit.monitor._sampler import Monitor, parse_devices, sample, samples
from memfit.monitor._samples import DeviceSample, ProcessSample, Sample, TorchStats
from memfit.monitor._stats import MemoryStats, memory_stats_from_dict, stats

__all__ = [
    "ALLOCATORS",
    "FRAMEWORKS",
    "METRICS",
    "Advice",
    "Configuration",
    "ConfigurationTooLateError",
    "ConfigurationWarning",
    "DeviceSample",
    "Diagnosis",
    "Exporter",
    "FrameworkInfo",
    "GpuInfo",
    "LinuxProcs",
    "MemoryInfo",
    "MemoryStats",
    "Monitor",
    "NvmlBackend",
    "NvmlCallError",
    "ProcInfo",
    "ProcReader",
    "ProcessSample",
    "ProcessSettings",
    "Published",
    "PublishedSource",
    "Publisher",
    "PynvmlBackend",
    "Replay",
    "RuntimeDir",
    "Sample",
    "SampleCollector",
    "SettingAction",
    "TorchStats",
    "configure",
    "diagnose",
    "frameworks_sources",
    "load_recording",
    "memory_stats_from_dict",
    "parse_cgroup",
    "parse_devices",
    "publish",
    "publisher_source",
    "resolve_frameworks",
    "runtime_dir",
    "sample",
    "samples",
    "settings_variable",
    "start_exporter",
    "stats",
]

_current: Publisher | None = None


def publish(interval: float = 1.0, directory: str | None = None) -> Publisher:
    """Publish this process's memory numbers (PyTorch's allocator stats; TensorFlow's and JAX's
    in :func:`stats`' schema) and settings every ``interval`` seconds for
    ``memfit watch`` and ``memfit export``, from a daemon thread, until the process ends (or
    ``stop()``; it is also a context manager). Never initialises CUDA.

    Calling it again returns the running publisher with the new interval. Under ``memfit
    run`` the child already publishes; this call takes that publisher's place.
    """
    global _current
    if not interval > 0:
        raise InvalidInputError(
            f"publish(interval={interval!r}) is not accepted; give seconds > 0, e.g. 1.0."
        )
    armed = sys.modules.get("_memfit_publisher")  # the copy memfit run loads (see oom/_bootstrap)
    if armed is not None and armed.active() is not None:
        armed.active().stop()
    if _current is not None and _current.running:
        if directory is None or directory == _current.directory:
            _current.interval = float(interval)
            return _current
        _current.stop()
    _current = Publisher(interval, directory, frameworks=_framework_numbers).start()
    return _current


def publisher_source() -> str:
    """The source of the publisher's module, which imports only the standard library: ``memfit
    run`` copies it beside the child's ``sitecustomize`` (``_memfit_publisher``), so a program
    whose Python has no memfit publishes its stats too."""
    return Path(_publisher.__file__).read_text(encoding="utf-8")


def frameworks_sources() -> dict[str, str]:
    """The sources of the framework modules (standard library only), by the name ``memfit run``
    gives their copies beside the child's ``sitecustomize``: the knobs
    (``_memfit_frameworks``: ``--limit`` applied at import) and the numbers
    (``_memfit_framework_numbers``: TensorFlow's and JAX's, read by the publisher)."""
    return {
        "_memfit_frameworks": Path(_frameworks.__file__).read_text(encoding="utf-8"),
        "_memfit_framework_numbers": Path(_framework_numbers.__file__).read_text(encoding="utf-8"),
    }


def settings_variable() -> str:
    """The environment variable through which ``memfit run`` hands its memory settings to the
    child's copy of the framework knobs (applied at import)."""
    return _frameworks.ENV_SETTINGS
