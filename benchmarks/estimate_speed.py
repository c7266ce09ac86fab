"""How long an estimate takes and how much memory it needs, on this machine's CPU.

    PYTHONPATH=src python benchmarks/estimate_speed.py [--out DIR]

Target (issue 2): Llama-2-7B training step, bf16, AdamW, batch 1 x 4096, in <= 10 s wall and
<= 2 GB peak RSS on a 2-core CPU. Each case runs in a fresh process so RSS is its own.
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
    import memfit  # import time counts: a user pays it too

    est = memfit.estimate(
        case["model"],
        batch_size=case["batch_size"],
        seq_len=case.get("seq_len"),
        precision=case.get("precision", "fp32"),
    )
    wall = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(
        "RESULT "
        + json.dumps(
            {
                **case,
                "wall_seconds": round(wall, 2),
                "trace_seconds": round(est.trace_seconds, 2),
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
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return 0
    rows = []
    for case in CASES:
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
                f"{case['model']:22s} {row['wall_seconds']:6.2f} s wall "
                f"({row['trace_seconds']:.2f} s tracing)  peak RSS "
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
