"""The optimizer variants the planner chooses, proved on the GPU: workloads whose plan
steps the optimizer in backward or keeps its states in 8 bits, run under the budget's cap beside
their twin, the same configuration with the fused AdamW.

    # on the CPU: plan each case (committed before the GPU runs them)
    PYTHONPATH=src python benchmarks/optimizer_proof.py plan --out PLANS.json [--only MODEL ...]
    # on the GPU: each plan in a process capped at the budget less the CUDA context
    PYTHONPATH=src python benchmarks/optimizer_proof.py measure PLANS.json --out MEASURED.json

``measure`` runs, per case, in one process capped as ``plan_proof.py`` caps it: memfit's loop
with the plan's configuration, the same with the fused AdamW (the twin: what the plan would
need without its optimizer variant), the plan applied with ``memfit.apply`` to a model and an
optimizer built as a user would (bitsandbytes' for 8-bit states), and a case's ``contenders``
(settings the planner weighed against its plan). An out-of-memory error is the result, not a
crash.
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

from plan_proof import _applied, _settings

CASES: list[dict[str, Any]] = [
    # a 7B fine-tune on a 48 GiB card: bf16 weights, gradients and AdamW state hold 50 GiB
    {
        "model": "llama-2-7b-hf",
        "global_batch": 2,
        "seq_len": 1024,
        "precisions": ["bf16"],
        "budget": "48GiB",
    },
    # GPT-2-large at 4 x 512 in bf16: 12.5 GiB stepping after backward, over a 12 GiB budget
    {
        "model": "gpt2-large",
        "global_batch": 4,
        "seq_len": 512,
        "precisions": ["bf16"],
        "budget": "12GiB",
        # what the planner weighed against its plan: stepping in backward without checkpointing
        "contenders": [{"activation_checkpointing": False, "optimizer": "adamw-in-backward"}],
    },
    # TinyLlama 8 x 1024 at 20 GiB: bf16-mixed fits only with 8-bit states (bitsandbytes);
    # without them the plan was fp32, full checkpointing, stepped in backward (1.5 s a step)
    {
        "model": "tinyllama-1.1b",
        "global_batch": 8,
        "seq_len": 1024,
        "precisions": ["bf16-mixed", "fp32"],
        "budget": "20GiB",
        "contenders": [
            {
                "precision": "fp32",
                "activation_checkpointing": True,
                "optimizer": "adamw-in-backward",
            }
        ],
    },
]


def make_plans(out: Path, only: list[str] | None) -> None:
    import memfit

    rows = []
    for case in CASES:
        if only and case["model"] not in only:
            continue
        started = time.perf_counter()
        result = memfit.plan(
            case["model"],
            budget=case["budget"],
            global_batch=case["global_batch"],
            batch_size=case["global_batch"],
            seq_len=case["seq_len"],
            precisions=case["precisions"],
        )
        seconds = time.perf_counter() - started
        rows.append(
            {
                "model": case["model"],
                "budget": case["budget"],
                "case": case,
                "seconds": seconds,
                "plan": result.to_dict(),
            }
        )
        print(f"{case['model']:16s} {case['budget']:6s} {seconds:5.1f} s  {result}", flush=True)
    meta = {"date": dt.date.today().isoformat(), "command": " ".join(sys.argv)}
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")


def child(row: dict[str, Any], steps: int) -> dict[str, Any]:
    import torch
    from step_times import measure

    from memfit._gpus import resolve_gpu
    from memfit._units import parse_size

    cap = parse_size(row["budget"]) - resolve_gpu("h200").context
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(cap / total)
    settings = _settings(row, row["plan"]["chosen"])
    family = settings["optimizer"].partition("-")[0]
    twin = {**settings, "optimizer": f"{family}-fused"}
    others = [{**settings, **c} for c in row["case"].get("contenders", ())]
    return {
        "cap": cap,
        "settings": settings,
        "loop": measure(row["model"], settings, steps),
        "twin": measure(row["model"], twin, steps),
        "contenders": [{"settings": o, **measure(row["model"], o, steps)} for o in others],
        "applied": _applied(row, steps),
    }


def measure_all(plans: Path, out: Path, steps: int) -> None:
    rows = json.loads(plans.read_text())["rows"]
    measured = []
    for i, row in enumerate(rows):
        if row["plan"]["chosen"] is None:
            continue
        env = dict(os.environ)
        env["PYTORCH_CUDA_ALLOC_CONF"] = row["plan"]["chosen"]["allocator_config"]
        cmd = [sys.executable, __file__, "child", str(plans), "--index", str(i)]
        cmd += ["--steps", str(steps)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        got = json.loads(line[7:]) if line else {"error": proc.stderr[-1500:]}
        measured.append({"model": row["model"], "budget": row["budget"], **got})
        parts = [(p, got.get(p, {})) for p in ("loop", "twin", "applied")]
        parts += [("other", r) for r in got.get("contenders", ())]
        for part, r in parts:
            shown = (
                f"{r['step_seconds'] * 1e3:7.1f} ms, {r['peak_reserved'] / 2**30:6.2f} GiB"
                if "step_seconds" in r
                else r.get("error", got.get("error", ""))[:100]
            )
            print(f"{row['model']:16s} {row['budget']:6s} {part:8s} {shown}", flush=True)
        out.write_text(json.dumps({"meta": {"command": " ".join(sys.argv)}, "rows": measured}))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["plan", "measure", "child"])
    parser.add_argument("plans", nargs="?", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--index", type=int)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--only", nargs="*", help="plan these models only")
    args = parser.parse_args()
    if args.what == "plan":
        make_plans(args.out, args.only)
    elif args.what == "measure":
        measure_all(args.plans, args.out, args.steps)
    else:
        row = json.loads(args.plans.read_text())["rows"][args.index]
        print("RESULT " + json.dumps(child(row, args.steps)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
