"""Record raw NVML readings (and the framework's own numbers) on a GPU machine, as test fixtures.

The views of ``memfit watch`` and ``memfit export`` are tested on the CPU from what a real driver
answered, not from invented numbers. This script asks NVML (through nvidia-ml-py) every query the
monitor uses, on every device, a few times, while scenarios run on the GPU: nothing running, one
training process, a training and an inference process, and a process that exits mid-recording.
Beside each NVML sample it stores what ``/proc`` says about every GPU process (user, command,
cgroup) and the PyTorch allocator stats each workload process wrote about itself at that moment.

Usage (on the GPU machine)::

    python benchmarks/nvml_record.py --out $OUT/nvml-h200.json.gz

Output: one gzipped JSON document ``{"meta": ..., "scenarios": [{"name", "samples": [...]}]}``;
each NVML call is stored as ``{"value": ...}`` or ``{"error": "<NVMLError class name>"}`` and
its duration in microseconds.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import platform
import pwd
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml as nv

WORKER = r"""
import json, os, sys, time, torch
from transformers import GPT2Config, GPT2LMHeadModel
kind, seconds, stats_path, batch = sys.argv[1], float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=6)).cuda()
if kind == "train":
    opt = torch.optim.AdamW(model.parameters())
else:
    model.eval()
ids = torch.randint(0, 50257, (batch, 512), device="cuda")
end = time.time() + seconds
step = 0
while time.time() < end:
    if kind == "train":
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    else:
        with torch.no_grad():
            model(input_ids=ids)
    torch.cuda.synchronize()
    step += 1
    stats = {"pid": os.getpid(), "time": time.time(), "step": step, "kind": kind,
             "allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved(),
             "max_allocated": torch.cuda.max_memory_allocated(),
             "max_reserved": torch.cuda.max_memory_reserved(),
             "device": torch.cuda.current_device(), "torch": torch.__version__}
    tmp = stats_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(stats, f)
    os.replace(tmp, stats_path)
"""


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "_fields_"):
        return {name: _jsonable(getattr(value, name)) for name, *_ in value._fields_}
    if type(value).__name__ == "nvmlFriendlyObject":  # process lists come converted like this
        return {name: _jsonable(v) for name, v in vars(value).items()}
    return value


def _call(fn: Callable[..., Any], *args: Any) -> dict[str, Any]:
    start = time.perf_counter()
    try:
        out: dict[str, Any] = {"value": _jsonable(fn(*args))}
    except nv.NVMLError as exc:
        out = {"error": type(exc).__name__, "message": str(exc)}
    out["us"] = round((time.perf_counter() - start) * 1e6, 1)
    return out


def _device_queries(handle: Any) -> dict[str, dict[str, Any]]:
    queries: dict[str, Callable[[], Any]] = {
        "name": lambda: nv.nvmlDeviceGetName(handle),
        "uuid": lambda: nv.nvmlDeviceGetUUID(handle),
        "index": lambda: nv.nvmlDeviceGetIndex(handle),
        "pci_bus_id": lambda: nv.nvmlDeviceGetPciInfo(handle).busId,
        "memory_v1": lambda: nv.nvmlDeviceGetMemoryInfo(handle),
        "memory_v2": lambda: nv.nvmlDeviceGetMemoryInfo(handle, version=nv.nvmlMemory_v2),
        "utilization": lambda: nv.nvmlDeviceGetUtilizationRates(handle),
        "temperature": lambda: nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU),
        "power_mw": lambda: nv.nvmlDeviceGetPowerUsage(handle),
        "power_limit_mw": lambda: nv.nvmlDeviceGetEnforcedPowerLimit(handle),
        "fan_percent": lambda: nv.nvmlDeviceGetFanSpeed(handle),
        "sm_clock_mhz": lambda: nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM),
        "mig_mode": lambda: nv.nvmlDeviceGetMigMode(handle),
        "compute_mode": lambda: nv.nvmlDeviceGetComputeMode(handle),
        "compute_processes": lambda: nv.nvmlDeviceGetComputeRunningProcesses(handle),
        "graphics_processes": lambda: nv.nvmlDeviceGetGraphicsRunningProcesses(handle),
        "process_utilization": lambda: nv.nvmlDeviceGetProcessUtilization(handle, 0),
    }
    return {name: _call(fn) for name, fn in queries.items()}


def _proc_info(pid: int) -> dict[str, Any]:
    base = Path("/proc") / str(pid)
    info: dict[str, Any] = {"pid": pid}
    try:
        uid = next(
            int(line.split()[1])
            for line in (base / "status").read_text().splitlines()
            if line.startswith("Uid:")
        )
        info["uid"] = uid
        try:
            info["user"] = pwd.getpwuid(uid).pw_name
        except KeyError:
            info["user"] = None
        raw = (base / "cmdline").read_bytes()
        info["cmdline"] = [part.decode(errors="replace") for part in raw.split(b"\0") if part]
        info["cgroup"] = (base / "cgroup").read_text()
        info["create_time_ticks"] = int((base / "stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, StopIteration) as exc:
        info["error"] = type(exc).__name__
    return info


def _sample(handles: list[Any], stats_dir: Path) -> dict[str, Any]:
    devices = [_device_queries(h) for h in handles]
    pids = {
        p["pid"]
        for dev in devices
        for key in ("compute_processes", "graphics_processes")
        for p in dev[key].get("value") or []
    }
    framework = []
    for path in sorted(stats_dir.glob("*.json")):
        try:
            framework.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
    return {
        "time": time.time(),
        "devices": devices,
        "procs": [_proc_info(pid) for pid in sorted(pids)],
        "framework": framework,
    }


def _start(kind: str, seconds: float, stats_dir: Path, batch: int) -> subprocess.Popen[bytes]:
    stats = stats_dir / f"{kind}-{time.monotonic_ns()}.json"
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, kind, str(seconds), str(stats), str(batch)]
    )


def _wait_for_stats(stats_dir: Path, count: int, timeout: float = 120.0) -> None:
    end = time.time() + timeout
    while time.time() < end and len(list(stats_dir.glob("*.json"))) < count:
        time.sleep(0.2)


def _record(name: str, handles: list[Any], stats_dir: Path, n: int, interval: float) -> dict:
    samples = []
    for _ in range(n):
        samples.append(_sample(handles, stats_dir))
        time.sleep(interval)
    print(f"{name}: {len(samples)} samples", flush=True)
    return {"name": name, "samples": samples}


def _run_scenarios(handles: list[Any], samples: int, interval: float) -> list[dict]:
    scenarios = []
    with tempfile.TemporaryDirectory() as tmp:
        stats_dir = Path(tmp)
        scenarios.append(_record("idle", handles, stats_dir, samples, interval))
        train = _start("train", 90, stats_dir, 8)
        _wait_for_stats(stats_dir, 1)
        scenarios.append(_record("train", handles, stats_dir, samples, interval))
        infer = _start("infer", 12, stats_dir, 32)
        _wait_for_stats(stats_dir, 2)
        scenarios.append(_record("train+infer", handles, stats_dir, samples, interval))
        # the inference process ends while we sample: a process that exits mid-read
        exits = []
        while infer.poll() is None:
            exits.append(_sample(handles, stats_dir))
            time.sleep(interval)
        exits += _record("after", handles, stats_dir, samples, interval)["samples"]
        scenarios.append({"name": "infer-exits", "samples": exits})
        train.terminate()
        train.wait()
    return scenarios


def _timing(handles: list[Any], rounds: int) -> dict[str, Any]:
    start_cpu, start = time.process_time(), time.perf_counter()
    for _ in range(rounds):
        for h in handles:
            nv.nvmlDeviceGetMemoryInfo(h)
            nv.nvmlDeviceGetUtilizationRates(h)
            nv.nvmlDeviceGetComputeRunningProcesses(h)
    return {
        "rounds": rounds,
        "devices": len(handles),
        "wall_s": time.perf_counter() - start,
        "cpu_s": time.process_time() - start_cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--interval", type=float, default=0.5)
    args = parser.parse_args()
    nv.nvmlInit()
    try:
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
        meta = {
            "date": datetime.date.today().isoformat(),
            "command": " ".join(sys.argv),
            "host": platform.node(),
            "python": platform.python_version(),
            "nvidia_ml_py": getattr(nv, "__version__", None),
            "driver": _call(nv.nvmlSystemGetDriverVersion),
            "cuda_driver": _call(nv.nvmlSystemGetCudaDriverVersion),
            "nvml_version": _call(nv.nvmlSystemGetNVMLVersion),
            "device_count": len(handles),
            "uid": os.getuid(),
        }
        document = {
            "meta": meta,
            "scenarios": _run_scenarios(handles, args.samples, args.interval),
            "timing": _timing(handles, 200),
        }
    finally:
        nv.nvmlShutdown()
    with gzip.open(args.out, "wt") as f:
        json.dump(document, f)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
