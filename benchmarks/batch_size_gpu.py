"""Batch-size finders on a real GPU: memfit.find_batch_size against accelerate's
``find_executable_batch_size``, and the true largest batch found by bisection.

Every method runs the same trial: a fresh model and optimizer on the GPU and two optimizer
steps (:func:`memfit._measure.measure`, the run ``memfit validate`` makes). Each method runs in
its own process, timed from its call to its answer (CUDA start-up included for both finders).
The ground truth bisects between memfit's margin-free estimate -10% and +10% (widened if the
bracket is wrong), each probe with a fresh model and an emptied cache.

Usage, on a GPU machine, from the repository root:

    PYTHONPATH=src python benchmarks/batch_size_gpu.py --out $OUT/batch_size.json \
        [--workloads bert gpt2 resnet50]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

WORKLOADS: dict[str, dict[str, Any]] = {
    "bert": {"model": "bert-base-uncased", "seq_len": 512, "precision": "fp32", "start": 512},
    "gpt2": {"model": "gpt2", "seq_len": 1024, "precision": "bf16-mixed", "start": 256},
    "resnet50": {"model": "resnet50", "seq_len": None, "precision": "fp32", "start": 2048},
}


def _workload(spec: dict[str, Any], batch_size: int) -> Any:
    from memfit._models import resolve_model
    from memfit._workload import workload_for

    recipe = resolve_model(spec["model"])
    return workload_for(
        recipe, batch_size, spec["seq_len"], optimizer="adamw", precision=spec["precision"]
    )


def _fits(spec: dict[str, Any], batch_size: int) -> tuple[bool, float]:
    """One trial with a fresh model: True if the two steps ran."""
    import gc

    import torch

    from memfit._measure import measure

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


def run_accelerate(spec: dict[str, Any]) -> dict[str, Any]:
    from accelerate.utils import find_executable_batch_size

    from memfit._measure import measure

    tried: list[int] = []

    @find_executable_batch_size(starting_batch_size=spec["start"])
    def train(batch_size: int) -> int:
        tried.append(batch_size)
        measure(_workload(spec, batch_size))
        return batch_size

    start = time.perf_counter()
    chosen = train()
    return {
        "batch_size": chosen,
        "trials": len(tried),
        "tried": tried,
        "seconds": time.perf_counter() - start,
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

    lo, hi = max(1, int(guess * 0.9)), int(guess * 1.1) + 1
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


def _child(method: str, name: str) -> int:
    spec = WORKLOADS[name]
    import torch  # noqa: F401  (imports are not part of any method's time)
    import transformers  # noqa: F401

    runner = {"accelerate": run_accelerate, "memfit": run_memfit, "truth": run_truth}[method]
    print("RESULT " + json.dumps(runner(spec)))
    return 0


def _run(method: str, name: str) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", method, name]
    out = subprocess.run(cmd, capture_output=True, text=True)
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
    for name in args.workloads:
        row: dict[str, Any] = {"spec": WORKLOADS[name]}
        for method in ("memfit", "accelerate", "truth"):
            row[method] = _run(method, name)
            print(name, method, {k: v for k, v in row[method].items() if k != "result"}, flush=True)
        try:
            truth = row["truth"]["batch_size"]
            row["memfit_vs_truth"] = row["memfit"]["batch_size"] / truth
            row["accelerate_vs_truth"] = row["accelerate"]["batch_size"] / truth
            row["speedup"] = row["accelerate"]["seconds"] / row["memfit"]["seconds"]
        except (KeyError, TypeError, ZeroDivisionError):
            pass
        report["workloads"][name] = row
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))
    print(
        json.dumps(
            {
                n: {k: r.get(k) for k in ("memfit_vs_truth", "accelerate_vs_truth", "speedup")}
                for n, r in report["workloads"].items()
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
