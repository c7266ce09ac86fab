"""The planner's throughput comparison, in one run: under each budget's cap, the plan's
configuration beside the configurations the exhaustive trial found faster, and the fastest with
full checkpointing. A configuration that does not hold its batch is given one already on the
GPU: earlier runs (2026-12-03) made each such contender's batch on the host and copied it each step,
10-30 ms of ViT-B/16's and ResNet-50's steps that the plans' held batches did not pay. A held
batch still makes its micro-batches on the host (the plan is charged that, not the others).

    PYTHONPATH=src python benchmarks/plan_versus.py PLANS.json TRIALS_DIR [TRIALS_DIR ...]
        --out FILE.json [--only MODEL ...] [--top 5] [--steps 5]

``plan_proof.py`` measured the plans on one machine and ``plan_trials.py`` the space on others;
host-bound steps differ by up to 40% between machines, so their ratio says little. Here, for
each plan, one process with the allocator capped at the budget less the CUDA context runs:
the plan's configuration; the ``--top`` configurations of the trial that were faster than the
plan's in the trial (whatever their free-running peak: under the cap the allocator frees its
cache and retries, so some run there after all); and the trial's fastest full-checkpointing
configuration. Each runs twice, in order and then in reverse (the machine's drift cancels), and
its faster median is kept; an out-of-memory error under the cap is the answer "does not fit".
The best by trial is then the fastest of those that ran. The process runs under the plan's
``PYTORCH_CUDA_ALLOC_CONF`` (an allocator setting is the process's), so every contender gets the
allocator the plan counted on. Several trial directories (the full grid, the partial
checkpointing sample) are read as one trial.
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

from plan_compare import _trials
from plan_proof import CASES, _settings
from results_io import read_json


def contenders(row: dict[str, Any], trials: list[Path], top: int) -> list[dict[str, Any]]:
    """The settings to run for one plan: the plan's; the ``top`` fastest of the trial that were
    faster than it there (all, where the plan's configuration was not in the trial) and the
    fastest of those that fitted the budget running free; the fastest full checkpointing,
    overall and of those that fitted."""
    from memfit._gpus import resolve_gpu
    from memfit._units import parse_size

    plan = _settings(row, row["plan"]["chosen"])
    room = parse_size(row["budget"]) - resolve_gpu("h200").context
    found = [r for directory in trials for r in _trials(directory, row["model"])]
    rows = sorted(found, key=lambda r: r["step_seconds"])
    mine = next((r for r in rows if _same(r["settings"], plan)), None)
    limit = mine["step_seconds"] if mine else float("inf")
    faster = [r for r in rows if r["step_seconds"] < limit]
    full = [r for r in rows if r["settings"]["activation_checkpointing"] is True]
    picks = [
        *faster[:top],
        *[r for r in faster if r["peak_reserved"] <= room][:1],
        *full[:1],
        *[r for r in full if r["peak_reserved"] <= room][:1],
    ]
    out = [plan]
    for r in picks:
        if not any(_same(r["settings"], o) for o in out):
            out.append(r["settings"])
    return out


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    keys = ("batch_size", "accumulation", "precision", "activation_checkpointing", "optimizer")
    return all(a.get(k) == b.get(k) for k in keys)


def child(row: dict[str, Any], configs: list[dict[str, Any]], steps: int) -> list[dict[str, Any]]:
    import torch
    from step_times import measure

    from memfit._gpus import resolve_gpu
    from memfit._units import parse_size

    cap = parse_size(row["budget"]) - resolve_gpu("h200").context
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(cap / total)
    runs: dict[int, list[dict[str, Any]]] = {i: [] for i in range(len(configs))}
    order = list(range(len(configs)))
    for sequence in (order, order[::-1]):
        for i in sequence:
            # a contender's batch made and on the GPU before its steps, as a data loader does
            # it beside; a held batch is already on the GPU (only its making is left in)
            ready = not configs[i].get("batch_held")
            runs[i].append(measure(row["model"], configs[i], steps, batch_on_gpu=ready))
    out = []
    for i, settings in enumerate(configs):
        ok = [r for r in runs[i] if "step_seconds" in r]
        out.append(
            {
                "settings": settings,
                "is_plan": i == 0,
                "step_seconds": min(r["step_seconds"] for r in ok) if ok else None,
                "peak_reserved": max((r["peak_reserved"] for r in ok), default=None),
                "error": next((r["error"] for r in runs[i] if "error" in r), None),
            }
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("plans", type=Path)
    parser.add_argument("trials", type=Path, nargs="+")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--child", type=int)
    parser.add_argument("--dry-run", action="store_true", help="print what would run")
    args = parser.parse_args()
    rows = read_json(args.plans)["rows"]
    if args.child is not None:
        row = rows[args.child]
        configs = contenders(row, args.trials, args.top)
        print("RESULT " + json.dumps(child(row, configs, args.steps)))
        return 0
    results = []
    for i, row in enumerate(rows):
        if (args.only and row["model"] not in args.only) or row["plan"]["chosen"] is None:
            continue
        configs = contenders(row, args.trials, args.top)
        print(f"{row['model']} {row['budget']}: {len(configs)} configurations", flush=True)
        if args.dry_run:
            continue
        cmd = [
            sys.executable,
            __file__,
            str(args.plans),
            *map(str, args.trials),
            "--child",
            str(i),
            "--top",
            str(args.top),
            "--steps",
            str(args.steps),
        ]
        env = dict(os.environ)
        if row["plan"]["chosen"].get("allocator_config"):
            env["PYTORCH_CUDA_ALLOC_CONF"] = row["plan"]["chosen"]["allocator_config"]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        got = json.loads(line[7:]) if line else [{"error": proc.stderr[-1500:]}]
        allocator = env.get("PYTORCH_CUDA_ALLOC_CONF", "")
        results.append(
            {"model": row["model"], "budget": row["budget"], "allocator": allocator, "runs": got}
        )
        for r in got:
            ms = f"{r['step_seconds'] * 1e3:7.1f} ms" if r.get("step_seconds") else "   OOM/err"
            print(
                f"   {'plan ' if r.get('is_plan') else '     '}{ms} {r.get('settings')}", flush=True
            )
        if args.out:
            meta = {
                "date": dt.date.today().isoformat(),
                "command": " ".join(sys.argv),
                "cases": CASES,
            }
            args.out.write_text(json.dumps({"meta": meta, "rows": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
