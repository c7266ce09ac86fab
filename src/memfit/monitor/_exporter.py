"""A Prometheus exporter: per-GPU and per-process memory, with PyTorch's own numbers beside.

Unlike dcgm-exporter, every process gets its own series, labelled by pid, user, command and,
where its cgroup shows them, container and pod, so a shared GPU shows who uses what. Processes
that publish their stats (``memfit.publish()`` or ``memfit run``) add ``memfit_torch_*`` series
and ``memfit_process_non_torch_bytes`` (NVML's figure minus PyTorch's reserved memory).

The collector samples on scrape, from a cached sample at most ``interval`` seconds old, so
several Prometheus servers scraping at once cost one NVML read per interval. A value NVML
cannot give is left out of the exposition rather than exported as a made-up number.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from memfit._errors import InvalidInputError, MissingExtraError
from memfit.monitor._sampler import Monitor
from memfit.monitor._samples import DeviceSample, ProcessSample, Sample

__all__ = ["METRICS", "Exporter", "SampleCollector", "start_exporter"]

_GPU_LABELS = ["gpu", "uuid", "name"]
_PROC_LABELS = ["gpu", "uuid", "pid", "user", "command", "container", "pod"]
_COMMAND_WIDTH = 120

# (metric, help, DeviceSample attribute, scale): a None attribute leaves the series out
_GPU_METRICS: list[tuple[str, str, str, float]] = [
    ("memfit_gpu_memory_used_bytes", "GPU memory in use (nvidia-smi memory.used)",
     "memory_used", 1),
    ("memfit_gpu_memory_total_bytes", "GPU memory in total (nvidia-smi memory.total)",
     "memory_total", 1),
    ("memfit_gpu_memory_driver_reserved_bytes", "GPU memory the driver keeps for itself",
     "memory_reserved", 1),
    ("memfit_gpu_memory_other_bytes", "used memory no listed process accounts for",
     "other", 1),
    ("memfit_gpu_utilization_ratio", "share of time a kernel ran (utilization.gpu / 100)",
     "utilization_gpu", 0.01),
    ("memfit_gpu_temperature_celsius", "GPU temperature", "temperature_c", 1),
    ("memfit_gpu_power_watts", "power draw", "power_w", 1),
]  # fmt: skip

# (metric, help, ProcessSample attribute)
_PROC_METRICS: list[tuple[str, str, str]] = [
    ("memfit_process_gpu_memory_bytes", "GPU memory of the process (nvidia-smi used_memory)",
     "used_memory"),
    ("memfit_process_non_torch_bytes",
     "process memory outside PyTorch's allocator: NVML used - torch reserved", "non_torch"),
]  # fmt: skip

# (metric, help, TorchStats attribute), from processes that publish
_TORCH_METRICS: list[tuple[str, str, str]] = [
    ("memfit_torch_allocated_bytes", "torch.cuda.memory_allocated()", "allocated"),
    ("memfit_torch_reserved_bytes", "torch.cuda.memory_reserved()", "reserved"),
    ("memfit_torch_max_allocated_bytes", "torch.cuda.max_memory_allocated()", "max_allocated"),
    ("memfit_torch_max_reserved_bytes", "torch.cuda.max_memory_reserved()", "max_reserved"),
    ("memfit_torch_inactive_split_bytes", "cached memory in split blocks (fragmentation)",
     "inactive_split"),
    ("memfit_torch_ooms", "out-of-memory errors the allocator raised (num_ooms)", "num_ooms"),
    ("memfit_torch_alloc_retries",
     "allocations retried after freeing the cache (num_alloc_retries)", "num_alloc_retries"),
    ("memfit_torch_stats_age_seconds", "age of the published stats", "age"),
]  # fmt: skip

# (metric, help, MemoryStats attribute): every framework's numbers in one schema
_FRAMEWORK_METRICS: list[tuple[str, str, str]] = [
    ("memfit_framework_in_use_bytes",
     "memory the framework's tensors hold (torch allocated, JAX bytes_in_use, TF current)",
     "in_use"),
    ("memfit_framework_peak_bytes", "the most of in_use so far", "peak"),
    ("memfit_framework_pool_bytes",
     "what the framework's allocator holds (torch reserved, JAX pool_bytes)", "pool"),
    ("memfit_framework_limit_bytes",
     "the most the framework may take (memory fraction, JAX bytes_limit, TF logical device)",
     "limit"),
]  # fmt: skip

METRICS: tuple[str, ...] = (
    *(m[0] for m in _GPU_METRICS),
    "memfit_gpu_up",
    *(m[0] for m in _PROC_METRICS),
    *(m[0] for m in _TORCH_METRICS),
    *(m[0] for m in _FRAMEWORK_METRICS),
    "memfit_sample_duration_seconds",
)


def _gpu_labels(dev: DeviceSample) -> list[str]:
    return [str(dev.index), dev.uuid or "", dev.name or ""]


def _proc_labels(dev: DeviceSample, proc: ProcessSample) -> list[str]:
    command = proc.command or ""
    if len(command) > _COMMAND_WIDTH:
        command = command[: _COMMAND_WIDTH - 1] + "…"
    return [
        str(dev.index),
        dev.uuid or "",
        str(proc.pid),
        proc.user or "",
        command,
        proc.container or "",
        proc.pod or "",
    ]


def _process_family(
    name: str, doc: str, rows: list[tuple[DeviceSample, ProcessSample, float | int | None]]
) -> Any:
    from prometheus_client.core import GaugeMetricFamily

    family = GaugeMetricFamily(name, doc, labels=_PROC_LABELS)
    for dev, proc, value in rows:
        if value is not None:
            family.add_metric(_proc_labels(dev, proc), float(value))
    return family


def _framework_family(
    name: str, doc: str, attr: str, procs: list[tuple[DeviceSample, ProcessSample]]
) -> Any:
    from prometheus_client.core import GaugeMetricFamily

    family = GaugeMetricFamily(name, doc, labels=[*_PROC_LABELS, "framework"])
    for dev, proc in procs:
        for row in proc.frameworks:
            value = getattr(row, attr)
            if value is not None:
                family.add_metric([*_proc_labels(dev, proc), row.framework], float(value))
    return family


class SampleCollector:
    """A ``prometheus_client`` collector over a :class:`Monitor` (samples on scrape, cached
    for ``interval`` seconds; thread-safe, as scrapes may come at once)."""

    def __init__(self, monitor: Monitor, interval: float = 1.0) -> None:
        self.monitor = monitor
        self.interval = interval
        self._lock = threading.Lock()
        self._sample: Sample | None = None
        self._taken = float("-inf")
        self._duration = 0.0

    def latest(self) -> Sample:
        """The cached sample, taken anew when older than ``interval``."""
        with self._lock:
            if self._sample is None or time.monotonic() - self._taken >= self.interval:
                start = time.perf_counter()
                self._sample = self.monitor.sample()
                self._duration = time.perf_counter() - start
                self._taken = time.monotonic()
            return self._sample

    def describe(self) -> list[Any]:
        return []  # no registration-time sampling

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        sample = self.latest()
        for name, doc, attr, scale in _GPU_METRICS:
            family = GaugeMetricFamily(name, doc, labels=_GPU_LABELS)
            for dev in sample.devices:
                value = getattr(dev, attr)
                if value is not None:
                    family.add_metric(_gpu_labels(dev), float(value) * scale)
            yield family
        up = GaugeMetricFamily(
            "memfit_gpu_up", "1 if the GPU answered NVML, 0 if lost or failing", labels=_GPU_LABELS
        )
        for dev in sample.devices:
            up.add_metric(_gpu_labels(dev), 1.0 if dev.status == "ok" else 0.0)
        yield up
        procs = [(dev, proc) for dev in sample.devices for proc in dev.processes]
        for name, doc, attr in _PROC_METRICS:
            yield _process_family(name, doc, [(d, p, getattr(p, attr)) for d, p in procs])
        for name, doc, attr in _TORCH_METRICS:
            rows = [(d, p, getattr(p.torch, attr)) for d, p in procs if p.torch is not None]
            yield _process_family(name, doc, rows)
        for name, doc, attr in _FRAMEWORK_METRICS:
            yield _framework_family(name, doc, attr, procs)
        yield GaugeMetricFamily(
            "memfit_sample_duration_seconds", "time the last sample took", value=self._duration
        )


@dataclass
class Exporter:
    """A running exporter; :meth:`stop` shuts its HTTP server down."""

    host: str
    port: int
    collector: SampleCollector
    _server: Any
    _thread: threading.Thread

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5.0)


def start_exporter(
    monitor: Monitor, host: str = "127.0.0.1", port: int = 9400, interval: float = 1.0
) -> Exporter:
    """Serve the metrics on ``http://host:port/metrics`` from a daemon thread (``port=0``: any
    free port). Binds to localhost unless told otherwise: the labels name users and commands."""
    try:
        from prometheus_client import CollectorRegistry, start_http_server
    except ImportError:
        raise MissingExtraError("prometheus-client", "memfit export", "export") from None
    registry = CollectorRegistry(auto_describe=False)
    collector = SampleCollector(monitor, interval)
    registry.register(collector)  # type: ignore[arg-type]
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise InvalidInputError(
            f"The exporter cannot listen on {host}:{port} ({exc.strerror or exc}). Another "
            "program may hold the port: pick another with --port, or check --host is an "
            "address of this machine."
        ) from None
    return Exporter(host, int(server.server_port), collector, server, thread)
