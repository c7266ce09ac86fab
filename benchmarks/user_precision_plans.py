"""Plans that search the user's own precision, against plans that search only bf16-mixed and fp32.

    PYTHONPATH=src python benchmarks/user_precision_plans.py --out PLANS.json

A Llama-style 1.1B model (TinyLlama's config) trained in pure bf16, global batch 16 x 2048
tokens, AdamW, planned for 24 GiB: once with the default search space (which holds the user's
bf16 beside bf16-mixed and fp32) and once with ``precisions=("bf16-mixed", "fp32")``, the space
before the user's precision was searched. The rows are in ``plan_proof.py``'s format, so

    PYTHONPATH=src python benchmarks/plan_proof.py measure PLANS.json --out MEASURED.json

runs each chosen configuration on the GPU under the budget (memfit's loop, then memfit.apply),
in the order of the rows: "searched" first, "defaults only" second.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

CASE = {"global_batch": 16, "seq_len": 2048, "budgets": ["24GiB"]}
MODEL = "tinyllama-1.1b"
SPACES = {"searched": None, "defaults only": ("bf16-mixed", "fp32")}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    import memfit
    from memfit.planner import plan

    rows = []
    for label, precisions in SPACES.items():
        started = time.perf_counter()
        result = plan(
            MODEL,
            budget="24GiB",
            gpu="h100",
            global_batch=CASE["global_batch"],
            batch_size=CASE["global_batch"],
            seq_len=CASE["seq_len"],
            precision="bf16",
            precisions=precisions,
        )
        seconds = time.perf_counter() - started
        rows.append(
            {
                "label": label,
                "model": MODEL,
                "budget": "24GiB",
                "seconds": seconds,
                "plan": result.to_dict(),
                "case": CASE,
            }
        )
        chosen = result.chosen.candidate.describe() if result.chosen else "nothing fits"
        print(f"{label:14s} {seconds:5.1f} s  {chosen}")
    import torch
    import transformers

    meta = {
        "date": dt.date.today().isoformat(),
        "memfit": memfit.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "command": " ".join(sys.argv),
        "cpu": os.cpu_count(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
