"""Where ``memfit.find_batch_size``'s time goes on a GPU host, and what could make it shorter.

Four measurements, each in a fresh process:

* ``cold``: seconds to import torch, start CUDA, make the first cuBLAS call, import memfit's
  finder.
* ``overlap``: whether CUDA's start-up in a background thread slows Python work in the main
  thread (does it hold the GIL?): a pure-Python loop timed alone and beside ``torch.cuda.init``.
* ``profile``: ``find_batch_size`` on BERT-base (s512, fp32, AdamW) under cProfile; the stats
  file and the result (estimates and trials with their seconds).
* ``tf32``: peak allocated/reserved and step time of the real two-step run with fp32 matrix
  products in full fp32 and in TF32 (``torch.set_float32_matmul_precision('high')``): a trial
  may use TF32 only if the memory is the same to the byte.

Usage, on a GPU machine, from the repository root:

    PYTHONPATH=src python benchmarks/batch_size_profile.py --out $OUT/batch_size_profile.json
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

TF32_WORKLOADS = [
    ("bert-base-uncased", 512, "fp32", 64),
    ("gpt2", 1024, "fp32", 16),
    ("tv:resnet50", None, "fp32", 128),
    ("gpt2", 1024, "bf16-mixed", 32),
]


def cold() -> dict[str, Any]:
    t0 = time.perf_counter()
    import torch

    t1 = time.perf_counter()
    torch.cuda.init()
    t2 = time.perf_counter()
    a = torch.ones(256, 256, device="cuda")
    (a @ a).sum().item()
    t3 = time.perf_counter()
    import memfit.runtime._batch_size  # noqa: F401

    t4 = time.perf_counter()
    return {
        "import_torch": t1 - t0,
        "cuda_init": t2 - t1,
        "first_matmul": t3 - t2,
        "import_finder": t4 - t3,
    }


def _spin(n: int) -> float:
    start = time.perf_counter()
    total = 0
    for i in range(n):
        total += i * i % 7
    return time.perf_counter() - start


def overlap() -> dict[str, Any]:
    import threading

    import torch

    n = 20_000_000
    alone = _spin(n)
    done: dict[str, float] = {}

    def init() -> None:
        start = time.perf_counter()
        torch.cuda.init()
        a = torch.ones(256, 256, device="cuda")
        (a @ a).sum().item()
        done["init"] = time.perf_counter() - start

    thread = threading.Thread(target=init)
    thread.start()
    beside = _spin(n)
    thread.join()
    return {"spin_alone": alone, "spin_beside_cuda_init": beside, "cuda_init_in_thread": done}


def profile(out: Path) -> dict[str, Any]:
    import cProfile

    import memfit

    prof = cProfile.Profile()
    start = time.perf_counter()
    prof.enable()
    result = memfit.find_batch_size(
        "bert-base-uncased", seq_len=512, precision="fp32", optimizer="adamw"
    )
    prof.disable()
    seconds = time.perf_counter() - start
    prof.dump_stats(str(out.with_name("find_batch_size.prof")))
    return {"seconds": seconds, "result": result.to_dict()}


def tf32() -> dict[str, Any]:
    import gc

    import torch

    from memfit.estimator._measure import measure
    from memfit.workload import make_workload
    from memfit.workload._models import resolve_model

    rows = []
    for name, seq_len, precision, batch in TF32_WORKLOADS:
        for mode in ("highest", "high", "highest"):
            torch.set_float32_matmul_precision(mode)
            work = make_workload(
                resolve_model(name), batch_size=batch, seq_len=seq_len, precision=precision
            )
            start = time.perf_counter()
            m, _ = measure(work)
            rows.append(
                {
                    "model": name,
                    "precision": precision,
                    "batch": batch,
                    "matmul": mode,
                    "peak_allocated": m.peak_allocated,
                    "peak_reserved": m.peak_reserved,
                    "step_seconds": m.step_seconds,
                    "trial_seconds": time.perf_counter() - start,
                }
            )
            print(rows[-1], flush=True)
            del work, m
            gc.collect()
            torch.cuda.empty_cache()
    torch.set_float32_matmul_precision("highest")
    return {"rows": rows}


def _child(part: str, out: Path) -> int:
    runner = {"cold": cold, "overlap": overlap, "tf32": tf32}
    result = profile(out) if part == "profile" else runner[part]()
    print("RESULT " + json.dumps(result))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("batch_size_profile.json"))
    parser.add_argument("--parts", nargs="*", default=["cold", "overlap", "profile", "tf32"])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return _child(args.child, args.out)
    report: dict[str, Any] = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }
    for part in args.parts:
        cmd = [sys.executable, __file__, "--child", part, "--out", str(args.out)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        found = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
        report[part] = (
            json.loads(found[-1][len("RESULT ") :]) if found else {"error": done.stderr[-3000:]}
        )
        print(part, json.dumps(report[part])[:2000], flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
