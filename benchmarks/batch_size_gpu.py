"""Batch-size finders on a real GPU: memfit.find_batch_size against accelerate's
``find_executable_batch_size``, and the true largest batch found by bisection.

Every method runs the same trial: a fresh model and optimizer on the GPU and two optimizer
steps (:func:`memfit.estimator.measure`, the run ``memfit validate`` makes). Each method runs in
its own process, timed from its call to its answer (CUDA start-up included for both finders;
torch and transformers are imported before the clock starts, whatever else a method imports
is timed). accelerate needs a starting batch size: it runs from three, the power of two above
the true largest batch and the next two (accelerate's "14 trials, 53 s" for BERT-base is a start
of 1024), as accelerate's time grows with how far its guess is above the answer and memfit's
does not. ``gpu_seconds`` is the time a method holds the GPU: memfit's trials (its estimates
run on the CPU and need no GPU), all of accelerate's time. The ground truth bisects around
memfit's margin-free estimate (+-3%, widened if the bracket is wrong), each probe with a fresh
model and an emptied cache, in full fp32.

Python's byte-code cache is warmed first by a child that imports what both finders import
(``PYTHONPYCACHEPREFIX``; the GPU machine's environment ships without ``.pyc`` files, which an
installed environment has), so that neither method is timed compiling Python source.

Usage, on a GPU machine, from the repository root:

    PYTHONPATH=src python benchmarks/batch_size_gpu.py --out $OUT/batch_size.json \
        [--workloads bert gpt2 resnet50]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

WORKLOADS: dict[str, dict[str, Any]] = {
    "bert": {
        "model": "bert-base-uncased",
        "seq_len": 512,
        "precision": "fp32",
        "starts": [512, 1024, 2048],
    },
    "gpt2": {
        "model": "gpt2",
        "seq_len": 1024,
        "precision": "bf16-mixed",
        "starts": [128, 256, 512],
    },
    "resnet50": {
        "model": "resnet50",
        "seq_len": None,
        "precision": "fp32",
        "starts": [2048, 4096, 8192],
    },
}
PYCACHE = "/tmp/memfit-bench-pycache"


def _workload(spec: dict[str, Any], batch_size: int) -> Any:
    from memfit.workload import make_workload
    from memfit.workload._models import resolve_model

    recipe = resolve_model(spec["model"])
    return make_workload(
        recipe,
        batch_size=batch_size,
        seq_len=spec["seq_len"],
        optimizer="adamw",
        precision=spec["precision"],
    )


def _fits(spec: dict[str, Any], batch_size: int) -> tuple[bool, float]:
    """One trial with a fresh model: True if the two steps ran."""
    import gc

    import torch

    from memfit.estimator._measure import measure

    start = time.perf_counter()
    try:
        measure(_workload(spec, batch_size))
        ok = True
    except torch.OutOfMemoryError as exc:
        exc.__traceback__ = None
        ok = False
    gc.collect()
    torch.cuda.empty_cache()
    return ok, time.perf_counter() - start


def run_accelerate(spec: dict[str, Any], start_batch: int) -> dict[str, Any]:
    from accelerate.utils import find_executable_batch_size

    from memfit.estimator._measure import measure

    tried: list[int] = []

    @find_executable_batch_size(starting_batch_size=start_batch)
    def train(batch_size: int) -> int:
        tried.append(batch_size)
        measure(_workload(spec, batch_size))
        return batch_size

    start = time.perf_counter()
    chosen = train()
    seconds = time.perf_counter() - start
    return {
        "batch_size": chosen,
        "trials": len(tried),
        "tried": tried,
        "seconds": seconds,
        "gpu_seconds": seconds,
    }


def run_memfit(spec: dict[str, Any]) -> dict[str, Any]:
    import memfit

    start = time.perf_counter()
    result = memfit.find_batch_size(
        spec["model"], seq_len=spec["seq_len"], precision=spec["precision"], optimizer="adamw"
    )
    seconds = time.perf_counter() - start
    return {
        "batch_size": result.batch_size,
        "trials": len(result.trials),
        "tried": [t.batch_size for t in result.trials],
        "seconds": seconds,
        "gpu_seconds": sum(t.seconds for t in result.trials),
        "result": result.to_dict(),
    }


def run_truth(spec: dict[str, Any]) -> dict[str, Any]:
    """The largest batch whose two steps run, by bisection around memfit's estimate."""
    import memfit

    guess = memfit.find_batch_size(
        spec["model"],
        seq_len=spec["seq_len"],
        precision=spec["precision"],
        optimizer="adamw",
        confirm=False,
        margin=0.0,
    ).batch_size
    probes: list[tuple[int, bool, float]] = []

    def probe(b: int) -> bool:
        ok, seconds = _fits(spec, b)
        probes.append((b, ok, round(seconds, 2)))
        return ok

    lo, hi = max(1, int(guess * 0.97)), int(guess * 1.03) + 1
    while lo > 1 and not probe(lo):
        hi, lo = lo, max(1, lo // 2)
    while probe(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probe(mid):
            lo = mid
        else:
            hi = mid
    return {"batch_size": lo, "estimate_without_margin": guess, "probes": probes}


def warm_bytecode() -> dict[str, Any]:
    """Import (and so compile) what the finders import, without touching the GPU."""
    import accelerate.utils  # noqa: F401

    import memfit

    for spec in WORKLOADS.values():
        memfit.find_batch_size(
            spec["model"],
            seq_len=spec["seq_len"],
            precision=spec["precision"],
            gpu="h200",
            confirm=False,
            max_batch=2,
        )
    return {}


def _child(method: str, name: str) -> int:
    spec = WORKLOADS[name]
    import torch  # noqa: F401  (imports are not part of any method's time)
    import transformers  # noqa: F401

    if method == "warm":
        result = warm_bytecode()
    elif method.startswith("accelerate@"):
        result = run_accelerate(spec, int(method.split("@")[1]))
    else:
        result = {"memfit": run_memfit, "truth": run_truth}[method](spec)
    print("RESULT " + json.dumps(result))
    return 0


def _run(method: str, name: str) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", method, name]
    env = {**os.environ, "PYTHONPYCACHEPREFIX": PYCACHE}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    return {"error": out.stderr[-3000:]}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workloads", nargs="*", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/batch_size.json"))
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return _child(*args.child)
    import accelerate
    import torch

    report: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "accelerate": accelerate.__version__,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "workloads": {},
    }
    start = time.perf_counter()
    report["warm_bytecode"] = _run("warm", args.workloads[0])
    report["warm_seconds"] = time.perf_counter() - start
    for name in args.workloads:
        row: dict[str, Any] = {"spec": WORKLOADS[name]}
        methods = ["memfit", *(f"accelerate@{b}" for b in WORKLOADS[name]["starts"]), "truth"]
        for method in methods:
            row[method] = _run(method, name)
            print(name, method, {k: v for k, v in row[method].items() if k != "result"}, flush=True)
        try:
            truth = row["truth"]["batch_size"]
            row["memfit_vs_truth"] = row["memfit"]["batch_size"] / truth
            for b in WORKLOADS[name]["starts"]:
                acc = row[f"accelerate@{b}"]
                row[f"accelerate@{b}_vs_truth"] = acc["batch_size"] / truth
                row[f"speedup_vs_accelerate@{b}"] = acc["seconds"] / row["memfit"]["seconds"]
                row[f"gpu_seconds_ratio_vs_accelerate@{b}"] = (
                    acc["gpu_seconds"] / row["memfit"]["gpu_seconds"]
                )
        except (KeyError, TypeError, ZeroDivisionError):
            pass
        report["workloads"][name] = row
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))
    print(
        json.dumps(
            {
                n: {k: v for k, v in r.items() if "_vs_" in k}
                for n, r in report["workloads"].items()
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
