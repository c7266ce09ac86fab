"""What watching costs: NVML sampling, ``memfit watch`` start-up, and the publisher in training.

    PYTHONPATH=src python benchmarks/monitor_overhead.py --out $OUT/monitor-overhead.json

Targets: sampling 8 GPUs at 10 Hz costs < 2% of one CPU core; ``memfit watch`` starts
in < 1 s; ``memfit.publish()`` adds < 1% to a training step.

(a) Sampling: ``Monitor.sample()`` on the real driver, CPU time (``time.process_time``) per
    sample and per GPU, idle and with a training process on every GPU (the process list and the
    publisher file are part of each sample). The machine has 1 or 2 GPUs; the cost for 8 GPUs
    at 10 Hz is an extrapolation, per-GPU cost x 80 per second, and is labelled so.
(b) Start-up: wall time of ``python -m memfit watch --once --json`` in a fresh process (the
    median of 5), beside ``python -c "import memfit"`` (which imports torch) and
    ``python -c "import memfit.monitor"`` alone.
(c) Publisher: a GPT-2 small (124M) training step (fp32, AdamW, batch 8 x 512 tokens) without
    a publisher, with ``memfit.publish(interval=1.0)`` and with a stress ``interval=0.01``;
    the settings alternate in blocks in one process so drift hits all alike; median step time.
    Also the CPU time of one ``publish_now()`` (a ``torch.cuda.memory_stats`` read and a file
    write) once CUDA is initialised.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SRC = str(ROOT / "src")


def _env(runtime: str) -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    env = dict(
        os.environ,
        PYTHONPATH=SRC + (os.pathsep + path if path else ""),
        MEMFIT_RUNTIME_DIR=runtime,
        # byte code cached as in an installed environment (the GPU machine ships none)
        PYTHONPYCACHEPREFIX=os.path.join(tempfile.gettempdir(), "memfit-bench-pycache"),
    )
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


# -- (c) the training worker --------------------------------------------------------------------

WORKER = r"""
import json, statistics, sys, time, torch
import memfit
from memfit.monitor import Publisher
from transformers import GPT2Config, GPT2LMHeadModel

mode, rounds, steps, device = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.cuda.set_device(device)
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config()).cuda()
opt = torch.optim.AdamW(model.parameters())
ids = torch.randint(0, 50257, (8, 512), device="cuda")

def step():
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)

for _ in range(10):
    step()
torch.cuda.synchronize()
if mode == "load":  # a publishing process for the sampling benchmark; runs until killed
    memfit.publish(interval=1.0)
    print("ready", flush=True)
    while True:
        step()
settings = {"none": None, "interval=1.0": 1.0, "interval=0.01": 0.01}
times = {name: [] for name in settings}
for _ in range(rounds):
    for name, interval in settings.items():
        pub = None if interval is None else Publisher(interval).start()
        for _ in range(steps):
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            times[name].append(time.perf_counter() - t0)
        if pub is not None:
            pub.stop()
pub = Publisher(1.0)
from memfit.monitor._publisher import prepare_runtime_dir
prepare_runtime_dir(pub.directory)
c0 = time.process_time()
for _ in range(1000):
    pub.publish_now()
write_us = (time.process_time() - c0) / 1000 * 1e6
pub.stop()
print("RESULT", json.dumps({
    "model": "GPT-2 small (124M), fp32, AdamW, batch 8 x 512",
    "steps_per_setting": rounds * steps,
    "median_step_ms": {k: statistics.median(v) * 1e3 for k, v in times.items()},
    "publish_now_cpu_us": write_us,
}))
"""


def publisher_overhead(runtime: str, rounds: int, steps: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", WORKER, "train", str(rounds), str(steps), "0"],
        env=_env(runtime),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    result: dict[str, Any] = json.loads(out.split("RESULT ", 1)[1])
    base = result["median_step_ms"]["none"]
    result["overhead_percent"] = {
        k: 100.0 * (v - base) / base for k, v in result["median_step_ms"].items() if k != "none"
    }
    return result


# -- (a) sampling cost ---------------------------------------------------------------------------


def _sampling_cost(samples: int) -> dict[str, Any]:
    from memfit.monitor import Monitor

    with Monitor() as monitor:
        for _ in range(5):
            monitor.sample()
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(samples):
            last = monitor.sample()
        cpu = (time.process_time() - c0) / samples
        wall = (time.perf_counter() - w0) / samples
        gpus = len(monitor.devices)
    per_gpu = cpu / gpus
    return {
        "gpus": gpus,
        "processes_seen": sum(len(d.processes) for d in last.devices),
        "published_seen": sum(1 for d in last.devices for p in d.processes if p.torch),
        "cpu_ms_per_sample": cpu * 1e3,
        "wall_ms_per_sample": wall * 1e3,
        "cpu_ms_per_gpu": per_gpu * 1e3,
        "extrapolated_8_gpus_10_hz_percent_of_one_core": per_gpu * 8 * 10 * 100,
    }


def sampling(runtime: str, samples: int) -> dict[str, Any]:
    os.environ["MEMFIT_RUNTIME_DIR"] = runtime
    import pynvml

    pynvml.nvmlInit()
    count = pynvml.nvmlDeviceGetCount()
    pynvml.nvmlShutdown()
    result = {"idle": _sampling_cost(samples)}
    loads = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, "load", "0", "0", str(i)],
            env=_env(runtime),
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(count)
    ]
    try:
        for proc in loads:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(1.5)
        result["training_on_every_gpu"] = _sampling_cost(samples)
    finally:
        for proc in loads:
            proc.kill()
            proc.wait()
    result["note"] = (
        "8 GPUs at 10 Hz is extrapolated from the per-GPU CPU cost measured here, x 80/s"
    )
    return result


# -- (b) start-up --------------------------------------------------------------------------------


def _wall(argv: list[str], runtime: str, runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, env=_env(runtime), capture_output=True, check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def startup(runtime: str) -> dict[str, Any]:
    py = sys.executable
    return {
        "watch_once_json_s": _wall([py, "-m", "memfit", "watch", "--once", "--json"], runtime),
        "import_memfit_s": _wall([py, "-c", "import memfit"], runtime),
        "import_memfit_monitor_s": _wall([py, "-c", "import memfit.monitor"], runtime),
        "python_s": _wall([py, "-c", "pass"], runtime),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument(
        "--parts",
        nargs="*",
        default=["sampling", "startup", "publisher"],
        choices=["sampling", "startup", "publisher"],
    )
    args = parser.parse_args()
    sys.path.insert(0, SRC)
    import pynvml
    import torch  # not initialising CUDA here: this process must not hold a GPU context

    pynvml.nvmlInit()
    gpu = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
    driver = pynvml.nvmlSystemGetDriverVersion()
    pynvml.nvmlShutdown()
    result: dict[str, Any] = {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "host": platform.node(),
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "gpu": gpu,
        "driver": driver,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as runtime:
        parts = {
            "sampling": lambda: sampling(runtime, args.samples),
            "startup": lambda: startup(runtime),
            "publisher": lambda: publisher_overhead(runtime, args.rounds, args.steps),
        }
        for name, part in parts.items():  # written after each part: a time limit costs one
            if name not in args.parts:
                continue
            start = time.perf_counter()
            result[name] = part()
            result[name + "_seconds"] = time.perf_counter() - start
            out.write_text(json.dumps(result, indent=2))
            print(name, json.dumps(result[name], indent=2), flush=True)


if __name__ == "__main__":
    main()
