"""The Prometheus exporter, served in-process from a recorded H200 sample and scraped."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest
from monitor_data import recorded, replay_monitor
from prometheus_client.parser import text_string_to_metric_families

from memfit import InvalidInputError
from memfit.monitor import METRICS, start_exporter

DASHBOARD = Path(__file__).parents[2] / "grafana" / "memfit-dashboard.json"


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        return response.read().decode()


@pytest.fixture
def train_exporter(recording):
    monitor = replay_monitor(recording, "train+infer")
    exporter = start_exporter(monitor, "127.0.0.1", 0, interval=3600.0)
    yield exporter
    exporter.stop()
    monitor.close()


def test_the_exposition_has_a_series_per_gpu_and_per_process(recording, train_exporter):
    text = _scrape(train_exporter.url)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    raw = recorded(recording, "train+infer")[0]
    dev = raw["devices"][0]
    used = families["memfit_gpu_memory_used_bytes"].samples
    assert [(s.labels["gpu"], s.labels["uuid"], s.value) for s in used] == [
        ("0", dev["uuid"]["value"], float(dev["memory_v2"]["value"]["used"]))
    ]
    procs = families["memfit_process_gpu_memory_bytes"].samples
    listed = {p["pid"]: p["usedGpuMemory"] for p in dev["compute_processes"]["value"]}
    assert {int(s.labels["pid"]): s.value for s in procs} == {
        k: float(v) for k, v in listed.items()
    }
    users = {p["pid"]: p["user"] for p in raw["procs"]}
    for s in procs:
        assert s.labels["user"] == users[int(s.labels["pid"])]
        assert "python" in s.labels["command"]
    # both workload processes published: torch series and non-torch for each
    stats = {f["pid"]: f for f in raw["framework"]}
    reserved = {
        int(s.labels["pid"]): s.value for s in families["memfit_torch_reserved_bytes"].samples
    }
    assert reserved == {pid: float(stats[pid]["reserved"]) for pid in listed}
    non_torch = families["memfit_process_non_torch_bytes"].samples
    for s in non_torch:
        pid = int(s.labels["pid"])
        assert s.value == listed[pid] - stats[pid]["reserved"] > 0


def test_values_the_driver_lacks_are_left_out(train_exporter):
    text = _scrape(train_exporter.url)
    # no N/A, NaN or -1 placeholders in the exposition
    assert "NaN" not in text and not re.search(r"^memfit_\S+ -1(\.0)?$", text, re.M)


def test_scrapes_within_the_interval_share_one_sample(train_exporter):
    first = _scrape(train_exporter.url)
    assert _scrape(train_exporter.url) == first  # the replay would have moved on otherwise


def test_a_busy_port_is_a_clear_error(recording, train_exporter):
    monitor = replay_monitor(recording, "idle")
    with pytest.raises(
        InvalidInputError, match=f"cannot listen on 127.0.0.1:{train_exporter.port}"
    ):
        start_exporter(monitor, "127.0.0.1", train_exporter.port)


def test_every_metric_the_dashboard_uses_is_exported():
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"\bmemfit_[a-z_]+", e)}
    assert used and used <= set(METRICS)
    # and the dashboard shows the point of the exporter: per process, torch beside NVML
    for name in (
        "memfit_process_gpu_memory_bytes",
        "memfit_torch_reserved_bytes",
        "memfit_process_non_torch_bytes",
        "memfit_gpu_memory_used_bytes",
    ):
        assert name in used


def test_every_frameworks_numbers_are_series_with_a_framework_label(recording):
    """A JAX process's own numbers (what its publisher wrote) in the framework series."""
    import dataclasses

    from prometheus_client import generate_latest
    from prometheus_client.core import CollectorRegistry

    from memfit.monitor import MemoryStats, SampleCollector

    sample = replay_monitor(recording, "train+infer").sample()
    dev = sample.devices[0]
    jax_row = MemoryStats("jax", "gpu:0", "gpu", 0, None, 5 * 2**30, 6 * 2**30, 100 * 2**30, None)
    first = dataclasses.replace(dev.processes[0], torch=None, frameworks=(jax_row,))
    sample = dataclasses.replace(
        sample, devices=(dataclasses.replace(dev, processes=(first, *dev.processes[1:])),)
    )

    class Fixed:
        def sample(self):
            return sample

    registry = CollectorRegistry()
    registry.register(SampleCollector(Fixed()))
    families = {
        f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())
    }
    (pool,) = families["memfit_framework_pool_bytes"].samples
    assert pool.labels["framework"] == "jax" and pool.labels["pid"] == str(first.pid)
    assert pool.value == 100 * 2**30
    assert families["memfit_framework_limit_bytes"].samples == []  # JAX said no limit
    assert {s.labels["pid"] for s in families["memfit_torch_allocated_bytes"].samples} == {
        str(dev.processes[1].pid)
    }
