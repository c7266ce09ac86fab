"""An offloading configuration applied with ``memfit.apply`` on the GPU, against its estimate.

    PYTHONPATH=src python benchmarks/offload_apply.py --predict --out PREDICTED.json   # CPU
    PYTHONPATH=src python benchmarks/offload_apply.py --out MEASURED.json              # GPU
    (--only PART ...: the cases whose name holds one of the parts; --trace DIR: allocator traces;
    --loop: memfit's own loop, as the GPU tests measure, in place of memfit.apply)

``CASES`` are candidates as the planner writes them (not chosen by a plan: on the H200 no plan
tried chose offload, see results/2026-12-02-h200-activation-offload/README.md); the first form
writes each one's estimate
and predicted step time, the second builds the model and AdamW as a user would, applies the
candidate with ``memfit.apply`` under a cap of the estimate's needs plus 5%, and runs its step
on full batches: the peaks and the median step after the first two. One process per case.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

CASES: dict[str, dict[str, Any]] = {
    "bert-base fp32 32 x 512, half checkpointed, the rest offloaded": {
        "model": "bert-base-uncased",
        "seq_len": 512,
        "candidate": {
            "micro_batch": 32,
            "accumulation": 1,
            "precision": "fp32",
            "checkpointing": 0.5,
            "optimizer": "adamw-fused",
            "offload": 1.0,
        },
    },
    "gpt2 bf16-mixed 8 x 1024, offload 0.5, 2-way accumulation": {
        "model": "gpt2",
        "seq_len": 1024,
        "candidate": {
            "micro_batch": 4,
            "accumulation": 2,
            "precision": "bf16-mixed",
            "checkpointing": False,
            "optimizer": "adamw-fused",
            "offload": 0.5,
        },
    },
}


def _full(micro: int, precision: str, **more: Any) -> dict[str, Any]:
    """A candidate with every block checkpointed, the inputs offloaded unless said."""
    return {
        "micro_batch": micro,
        "accumulation": 1,
        "precision": precision,
        "checkpointing": True,
        "optimizer": "adamw-fused",
        "offload_checkpoints": True,
        **more,
    }


# the inputs of checkpointed blocks offloaded (``offload_checkpoints``), each beside
# its twin that keeps them (the memory they free, the time the copies cost)
CASES.update(
    {
        "bert-base fp32 32 x 512, full checkpointing, inputs offloaded": {
            "model": "bert-base-uncased",
            "seq_len": 512,
            "candidate": _full(32, "fp32"),
        },
        "bert-base fp32 32 x 512, full checkpointing": {
            "model": "bert-base-uncased",
            "seq_len": 512,
            "candidate": _full(32, "fp32", offload_checkpoints=False),
        },
        "gpt2 bf16-mixed 8 x 1024, full checkpointing, inputs offloaded": {
            "model": "gpt2",
            "seq_len": 1024,
            "candidate": _full(8, "bf16-mixed"),
        },
        "tinyllama bf16-mixed 1 x 16384, full checkpointing, inputs offloaded": {
            "model": "tinyllama-1.1b",
            "seq_len": 16384,
            "candidate": _full(1, "bf16-mixed"),
        },
        "tinyllama bf16-mixed 1 x 16384, full checkpointing": {
            "model": "tinyllama-1.1b",
            "seq_len": 16384,
            "candidate": _full(1, "bf16-mixed", offload_checkpoints=False),
        },
        "qwen2.5-0.5b bf16 2 x 4096, half checkpointed and the rest offloaded, inputs offloaded": {
            "model": "qwen2.5-0.5b",
            "seq_len": 4096,
            "candidate": _full(2, "bf16", checkpointing=0.5, offload=1.0),
        },
        "resnet50 fp32 128, full checkpointing, inputs offloaded": {
            "model": "tv:resnet50",
            "seq_len": None,
            "candidate": _full(128, "fp32"),
        },
        "vit-b16 bf16-mixed 128, full checkpointing, inputs offloaded": {
            "model": "timm:vit_base_patch16_224",
            "seq_len": None,
            "candidate": _full(128, "bf16-mixed"),
        },
    }
)


def _plan(name: str) -> Any:
    """The case as a one-candidate plan, its memory and step time estimated here."""
    from memfit._gpus import resolve_gpu
    from memfit.planner import (
        Candidate,
        Evaluated,
        Plan,
        candidate_costs,
        model_key,
        step_time_of,
    )
    from memfit.workload import make_workload

    case = CASES[name]
    c = Candidate(**case["candidate"])
    gpu = resolve_gpu("h200")
    settings = {k: v for k, v in c.settings().items() if v is not None}
    workload = make_workload(case["model"], seq_len=case["seq_len"], gpu="h200", **settings)
    from memfit.estimator._estimate import estimate_workload

    estimate = estimate_workload(workload)
    costs, traced = candidate_costs(workload, gpu)
    seconds = step_time_of(workload, costs, traced, gpu).seconds
    needed = estimate.peak_reserved + estimate.non_pytorch
    e = Evaluated(
        c,
        estimate.peak_allocated,
        estimate.peak_reserved,
        needed,
        seconds,
        0.0,
        None,
        "gpu",
        True,
        (),
    )
    model = workload.build_model
    with __import__("torch").device("meta"):
        key = model_key(model())
    total = c.micro_batch * c.accumulation
    plan = Plan(case["model"], key, needed, needed, 0.0, total, case["seq_len"], e, [e], e)
    return plan, workload


def run_in_loop(name: str, trace: Path | None) -> dict[str, Any]:
    """The case's workload measured by memfit's own loop (``measure``), as the GPU tests do."""
    from memfit.estimator._measure import measure

    plan, workload = _plan(name)
    result, snapshot = measure(workload, record_history=trace is not None)
    if trace is not None:
        _dump(snapshot, trace / f"trace-loop-{_slug(name)}.pickle.gz")
    return {
        "case": name,
        "path": "loop",
        "estimate_allocated": plan.chosen.peak_allocated,
        "estimate_reserved": plan.chosen.peak_reserved,
        **result.to_dict(),
    }


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name)[:60]


def _dump(snapshot: Any, path: Path) -> None:
    import gzip
    import pickle

    for entries in snapshot.get("device_traces", []):
        for entry in entries:
            entry.pop("frames", None)
    with gzip.open(path, "wb") as fh:
        pickle.dump(snapshot, fh)


def run_case(
    name: str, steps: int, trace: Path | None = None, capped: bool = True
) -> dict[str, Any]:
    import torch

    import memfit
    from memfit.workload import make_workload

    plan, _ = _plan(name)
    case = CASES[name]
    row: dict[str, Any] = {"case": name, "estimate_allocated": plan.chosen.peak_allocated}
    row["estimate_reserved"] = plan.chosen.peak_reserved
    row["predicted_seconds"] = plan.chosen.step_seconds
    total = plan.global_batch
    full = make_workload(case["model"], batch_size=total, seq_len=case["seq_len"], gpu="h200")
    cap = int(plan.chosen.needed * 1.05) if capped else 0
    if cap:
        torch.cuda.set_per_process_memory_fraction(
            cap / torch.cuda.get_device_properties(0).total_memory
        )
    with torch.device("cuda"):
        model = full.build_model()
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    step = memfit.apply(model, optimizer, plan, loss_fn=full.loss_fn)
    from torch.utils._pytree import tree_map

    batch = tree_map(lambda v: v.cuda() if isinstance(v, torch.Tensor) else v, full.make_batch())
    if os.environ.get("EMPTY_CACHE"):  # what the model's build left cached, given back
        torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    if trace is not None:
        torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        started = time.perf_counter()
        step(batch)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    if trace is not None:
        _dump(torch.cuda.memory._snapshot(), trace / f"trace-apply-{_slug(name)}.pickle.gz")
    row.update(
        cap=cap,
        # the out-of-memory errors AutoMicrobatch recovered from, and its micro-batch after
        incidents=[str(i) for i in step.guard.incidents],
        micro_batch=step.micro_batch,
        changes=list(step.changes),
        step_seconds=statistics.median(times[2:]),
        all_step_seconds=[round(t, 5) for t in times],
        peak_allocated=torch.cuda.max_memory_allocated(),
        peak_reserved=torch.cuda.max_memory_reserved(),
    )
    return row


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--predict", action="store_true")
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--only", nargs="+", default=None, help="cases whose name has one of these")
    parser.add_argument("--trace", type=Path, default=None, help="allocator traces to this folder")
    parser.add_argument("--loop", action="store_true", help="memfit's own loop in place of apply")
    parser.add_argument("--no-cap", action="store_true", help="no memory cap (default: needs+5%%)")
    args = parser.parse_args()
    if args.child:
        row = (
            run_in_loop(args.child, args.trace)
            if args.loop
            else run_case(args.child, args.steps, args.trace, not args.no_cap)
        )
        print("RESULT " + json.dumps(row), flush=True)
        return 0
    rows = []
    for name in CASES:
        if args.only and not any(part in name for part in args.only):
            continue
        if args.predict:
            plan, _ = _plan(name)
            rows.append(
                {
                    "case": name,
                    "estimate_allocated": plan.chosen.peak_allocated,
                    "estimate_reserved": plan.chosen.peak_reserved,
                    "predicted_seconds": plan.chosen.step_seconds,
                }
            )
        else:
            cmd = [sys.executable, __file__, "--out", str(args.out), "--child", name]
            cmd += ["--trace", str(args.trace)] if args.trace else []
            cmd += ["--loop"] if args.loop else []
            cmd += ["--no-cap"] if args.no_cap else []
            proc = subprocess.run(
                [*cmd, "--steps", str(args.steps)], capture_output=True, text=True
            )
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            rows.append(
                json.loads(line[7:]) if line else {"case": name, "error": proc.stderr[-3000:]}
            )
        print(json.dumps(rows[-1])[:400], flush=True)
    meta = {"date": dt.date.today().isoformat(), "command": " ".join(sys.argv)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
