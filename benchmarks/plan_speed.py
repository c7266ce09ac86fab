"""How long memfit.plan takes on this CPU (the target: a Llama-2-7B step over at least 50
candidates in at most 60 s on 2 cores).

    PYTHONPATH=src python benchmarks/plan_speed.py [--out FILE.json] [--workers N]

Plans a Llama-2-7B training step (global batch 8 x 4096 tokens, AdamW) for an H200, searching
bf16-mixed, pure bf16 and fp32, no/selective/full checkpointing, three optimizer variants and two
allocator settings. Measured: the import of torch, transformers' Llama modules and memfit (once),
then the plan's wall time, its traces and candidates.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--workers", type=int)
    args = parser.parse_args()
    started = time.perf_counter()
    import transformers.models.llama.modeling_llama  # noqa: F401

    import memfit

    imports = time.perf_counter() - started
    started = time.perf_counter()
    plan = memfit.plan(
        "llama-2-7b-hf",
        budget="h200",
        global_batch=8,
        batch_size=8,
        seq_len=4096,
        precisions=("bf16-mixed", "bf16", "fp32"),
        workers=args.workers,
    )
    seconds = time.perf_counter() - started
    result = {
        "date": dt.date.today().isoformat(),
        "command": " ".join(sys.argv),
        "cpus": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "imports_seconds": round(imports, 2),
        "plan_seconds": round(seconds, 2),
        "traces": plan.traces,
        "candidates": len(plan.candidates),
        "chosen": plan.chosen.to_dict() if plan.chosen else None,
        "versions": plan.versions,
    }
    print(json.dumps(result, indent=1))
    print(plan)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
