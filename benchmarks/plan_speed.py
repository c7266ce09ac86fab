"""How long ``memfit plan`` takes as a whole process on this CPU: interpreter start, imports,
the search and the report, as a user waits for it.

    PYTHONPATH=src python benchmarks/plan_speed.py [--runs 3] [--out FILE.json] [--only NAME ...]

Each case is a ``memfit plan`` command run ``--runs`` times in a fresh process (after one run not
counted, which warms the file cache); the wall time's minimum, median and maximum are recorded,
with the traces and candidates the plan reports (from ``--json``) and the exit code (1 where
nothing fits: the search is as long). The target: the Llama-2-7B case ``llama-2-7b-1x4096`` in
at most 15 s on 2 cores.
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
import time
from pathlib import Path
from typing import Any

CASES: dict[str, list[str]] = {
    # the planning-time target: one 4,096-token sample, bf16-mixed, a 48 GiB budget
    "llama-2-7b-1x4096": [
        "llama-2-7b",
        "-b",
        "1",
        "-s",
        "4096",
        "-p",
        "bf16-mixed",
        "--gpu",
        "48GiB",
    ],
    # a pure bf16 user: their precision searched beside the defaults
    "llama-2-7b-2x1024-bf16": [
        "llama-2-7b",
        "-b",
        "2",
        "-s",
        "1024",
        "-p",
        "bf16",
        "--gpu",
        "48GiB",
    ],
    # a large global batch: micro-batches with accumulation searched
    "gpt2-256x1024": ["gpt2", "-b", "256", "-s", "1024", "-p", "bf16-mixed", "--gpu", "24GiB"],
    # the README's example
    "bert-base-32x512": ["bert-base-uncased", "-b", "32", "-s", "512", "--gpu", "12GiB"],
}


def _run_once(args: list[str]) -> tuple[float, int, dict[str, Any] | None]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "memfit", "plan", *args, "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        report = None
    return seconds, done.returncode, report


def time_case(args: list[str], runs: int) -> dict[str, Any]:
    """Wall seconds of ``memfit plan ARGS`` over ``runs`` fresh processes after one not counted."""
    _run_once(args)
    walls, codes, report = [], set(), None
    for _ in range(runs):
        seconds, code, report = _run_once(args)
        walls.append(seconds)
        codes.add(code)
    out: dict[str, Any] = {
        "command": "memfit plan " + " ".join(args),
        "wall_seconds": {
            "min": round(min(walls), 2),
            "median": round(statistics.median(walls), 2),
            "max": round(max(walls), 2),
        },
        "runs": runs,
        "exit_codes": sorted(codes),
    }
    if report:
        out["traces"] = report.get("traces")
        out["candidates"] = len(report.get("candidates", []))
        out["fits"] = report.get("fits")
    return out


def _versions() -> dict[str, str]:
    import torch
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--only", nargs="*", choices=sorted(CASES))
    args = parser.parse_args()
    result: dict[str, Any] = {
        "date": dt.date.today().isoformat(),
        "command": " ".join(["python", *sys.argv]),
        "cpus": len(os.sched_getaffinity(0)),
        "versions": _versions(),
        "cases": {},
    }
    for name in args.only or CASES:
        result["cases"][name] = time_case(CASES[name], args.runs)
        row = result["cases"][name]
        wall = row["wall_seconds"]
        print(f"{name:26} median {wall['median']:6.2f} s  (min {wall['min']:.2f}, max "
              f"{wall['max']:.2f}; {row.get('traces')} traces)", flush=True)  # fmt: skip
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
