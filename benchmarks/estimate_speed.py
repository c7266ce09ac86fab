"""How long an estimate takes and how much memory it needs, on this machine's CPU.

    PYTHONPATH=src python benchmarks/estimate_speed.py [--out DIR]

Targets: Llama-2-7B training step, bf16, AdamW, batch 1 x 4096, in <= 10 s wall and <= 2 GB
peak RSS on a 2-core CPU, then <= 3 s. Each case runs in a fresh process so
RSS is its own. Reported per case: the process's wall time to the first estimate (what
``memfit estimate`` costs at the command line), the imports it starts with (torch and
transformers), the first estimate call (which also imports the model's library code:
transformers' Llama modules take 2-3 s here), of which tracing, and a second call of the same
estimate in the same process (what a Python user pays for the next estimate); ``--repeat N``
runs each case N times, one after the other, and keeps every run (the machine's speed varies
from one minute to the next).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

CASES = [
    {"model": "llama-2-7b-hf", "batch_size": 1, "seq_len": 4096, "precision": "bf16"},
    {"model": "meta-llama-3-8b", "batch_size": 1, "seq_len": 4096, "precision": "bf16-mixed"},
    {"model": "llama-2-70b-hf", "batch_size": 1, "seq_len": 4096, "precision": "bf16"},
    {"model": "bert-base-uncased", "batch_size": 32, "seq_len": 512},
    {"model": "tv:resnet50", "batch_size": 64},
]


def child(case: dict) -> None:
    start = time.perf_counter()
    import torch  # noqa: F401  (import time counts: a command-line user pays it too)
    import transformers  # noqa: F401

    import memfit

    imported = time.perf_counter()
    calls = []
    for _ in range(2):  # the first call imports the model's library code; the second does not
        began = time.perf_counter()
        est = memfit.estimate(
            case["model"],
            batch_size=case["batch_size"],
            seq_len=case.get("seq_len"),
            precision=case.get("precision", "fp32"),
        )
        calls.append((time.perf_counter() - began, est.trace_seconds))
        if len(calls) == 1:
            wall = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(
        "RESULT "
        + json.dumps(
            {
                **case,
                "wall_seconds": round(wall, 2),
                "import_seconds": round(imported - start, 2),
                "estimate_seconds": round(calls[0][0], 2),
                "trace_seconds": round(calls[0][1], 2),
                "second_estimate_seconds": round(calls[1][0], 2),
                "second_trace_seconds": round(calls[1][1], 2),
                "peak_rss_bytes": rss,
                "peak_allocated": est.peak_allocated,
                "events": len(est.timeline.allocated),
            }
        )
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--only", nargs="*", help="models to run (default: all)")
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return 0
    rows = []
    cases = [c for c in CASES if not args.only or c["model"] in args.only]
    for case in [c for c in cases for _ in range(args.repeat)]:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", json.dumps(case)], capture_output=True, text=True
        )
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        row = json.loads(line[7:]) if line else {**case, "error": proc.stderr[-2000:]}
        rows.append(row)
        if "error" in row:
            print(f"{case['model']:22s} ERROR {row['error'][-300:]}")
        else:
            print(
                f"{case['model']:22s} {row['wall_seconds']:6.2f} s wall, "
                f"{row['import_seconds']:.2f} s imports, {row['estimate_seconds']:.2f} s "
                f"estimate ({row['trace_seconds']:.2f} s tracing), again "
                f"{row['second_estimate_seconds']:.2f} s  peak RSS "
                f"{row['peak_rss_bytes'] / 2**30:.2f} GiB"
            )
    meta = {
        "date": dt.date.today().isoformat(),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": __import__("torch").__version__,
        "command": " ".join(sys.argv),
    }
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "estimate_speed.json").write_text(
            json.dumps({"meta": meta, "rows": rows}, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
