"""How long an estimate of one FSDP2 rank takes on this machine's CPU (the target: a
64-rank Llama-2-70B step within 60 s on 2 cores).

    PYTHONPATH=src python benchmarks/fsdp2_speed.py OUT.json
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path

import memfit

CASES = [
    {"model": "llama-2-70b", "world_size": 64},
    {"model": "llama-2-7b", "world_size": 64},
    {"model": "llama-2-7b", "world_size": 8},
]


def main() -> int:
    import torch
    import transformers

    rows = []
    for case in CASES:
        start = time.perf_counter()
        est = memfit.estimate(
            case["model"],
            batch_size=1,
            seq_len=4096,
            precision="bf16-mixed",
            activation_checkpointing=True,
            strategy="fsdp2",
            world_size=case["world_size"],
        )
        seconds = time.perf_counter() - start
        row = {
            **case,
            "seconds": round(seconds, 2),
            "peak_allocated": est.peak_allocated,
            "peak_reserved": est.peak_reserved,
            "ranks_traced": sum(r.traced for r in est.ranks),
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    meta = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "cpu_cores": len(os.sched_getaffinity(0)),
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "setting": "batch 1 x 4096, bf16-mixed (FSDP2's policy), checkpointing, AdamW",
    }
    Path(sys.argv[1]).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
