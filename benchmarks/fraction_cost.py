"""What freeing the cache in every step costs a plan that fits a memory fraction only so.

    PYTHONPATH=src:benchmarks python benchmarks/fraction_cost.py PLANS.json MODEL@BUDGET
        --out FILE.json [--steps 10] [--rounds 2]

A plan chosen because it runs in a budget by the allocator freeing its cache (``planner._settle``)
frees it once on a GPU of the budget's size, but in every step under
``torch.cuda.set_per_process_memory_fraction`` (a fraction refuses a whole request where a full
GPU maps what is left). Its note said what one free took (18-19 ms, from an allocator history);
runs on 2026-12-03 measured the step under the cap 4 to 104 ms slower than the same configuration
uncapped, each in another process and another allocator setting. Here both run in one process
under the plan's ``PYTORCH_CUDA_ALLOC_CONF``, in turns (uncapped, capped, ...), each a fresh
model: the step times, the cache frees per step and the peaks.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from plan_proof import _settings, chosen_row


def child(row: dict[str, Any], steps: int, rounds: int) -> list[dict[str, Any]]:
    import torch
    from step_times import measure

    from memfit._gpus import resolve_gpu
    from memfit._units import parse_size

    cap = parse_size(row["budget"]) - resolve_gpu("h200").context
    total = torch.cuda.get_device_properties(0).total_memory
    settings = _settings(row, row["plan"]["chosen"])
    out = []
    for i in range(rounds):
        for capped in (False, True) if i % 2 == 0 else (True, False):
            torch.cuda.set_per_process_memory_fraction(cap / total if capped else 1.0)
            got = measure(row["model"], settings, steps)
            got.pop("traceback", None)
            out.append({"capped": capped, "round": i, **got})
            torch.cuda.empty_cache()
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("plans", type=Path)
    parser.add_argument("which", help="MODEL@BUDGET, a row of PLANS.json")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", action="store_true")
    args = parser.parse_args()
    row = chosen_row(args.plans, args.which)
    if args.child:
        print("RESULT " + json.dumps(child(row, args.steps, args.rounds)))
        return 0
    env = dict(os.environ)
    allocator = row["plan"]["chosen"].get("allocator_config") or ""
    if allocator:
        env["PYTORCH_CUDA_ALLOC_CONF"] = allocator
    cmd = [sys.executable, __file__, str(args.plans), args.which, "--out", str(args.out)]
    cmd += ["--steps", str(args.steps), "--rounds", str(args.rounds), "--child"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    runs = json.loads(line[7:]) if line else [{"error": proc.stderr[-2000:]}]
    for r in runs:
        ms = f"{r['step_seconds'] * 1e3:7.1f} ms" if r.get("step_seconds") else r.get("error")
        print(f"capped={r.get('capped')!s:5} {ms} frees after each step {r.get('alloc_retries')}")
    meta = {"date": dt.date.today().isoformat(), "command": " ".join(sys.argv)}
    meta["allocator"] = allocator
    args.out.write_text(json.dumps({"meta": meta, "row": which_row(row), "runs": runs}, indent=1))
    return 0


def which_row(row: dict[str, Any]) -> dict[str, Any]:
    chosen = row["plan"]["chosen"]
    return {"model": row["model"], "budget": row["budget"], "chosen": chosen}


if __name__ == "__main__":
    raise SystemExit(main())
