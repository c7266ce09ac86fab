"""The planner's proof: the plan memfit chooses on the CPU, run on the GPU under its budget, against
the best configuration an exhaustive GPU trial finds (``plan_trials.py``).

    # on the CPU: plan every workload at every budget, keep the plans (committed first)
    PYTHONPATH=src python benchmarks/plan_proof.py plan --out PLANS.json [--only MODEL ...]
    # on the GPU: run each plan's configuration under the budget
    PYTHONPATH=src python benchmarks/plan_proof.py measure PLANS.json --out MEASURED.json
        [--only MODEL[@BUDGET] ...] [--history DIR]  # DIR: each loop's and applied step's
                                                      # allocator history
    # anywhere: the table
    python benchmarks/plan_proof.py compare PLANS.json MEASURED.json TRIALS_DIR [--out FILE.md]

``measure`` runs each chosen configuration in a fresh process with the caching allocator capped
at the budget less the CUDA context (``torch.cuda.set_per_process_memory_fraction``; the context
is memfit's measured H200 figure), ``PYTORCH_CUDA_ALLOC_CONF`` as the plan says: memfit's own
step loop (``step_times.measure``, the loop the trials ran), then the same configuration applied
to a model and optimizer built by hand with ``memfit.apply`` and run through the returned step.
An out-of-memory error is recorded, not raised. ``compare`` takes the trials' fastest
configuration whose measured peak reserved plus the context is within the budget as the best by
exhaustive trial, and the fastest with full checkpointing likewise.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from results_io import read_json

GiB = 2**30
CASES: dict[str, dict[str, Any]] = {
    "bert-base-uncased": {
        "global_batch": 32,
        "seq_len": 512,
        "budgets": ["16GiB", "10GiB", "6GiB"],
    },
    "gpt2": {"global_batch": 16, "seq_len": 1024, "budgets": ["24GiB", "12GiB", "8GiB"]},
    "tinyllama-1.1b": {"global_batch": 8, "seq_len": 1024, "budgets": ["48GiB", "32GiB", "24GiB"]},
    "timm:vit_base_patch16_224": {"global_batch": 128, "budgets": ["10GiB", "6GiB", "4GiB"]},
    "tv:resnet50": {"global_batch": 128, "budgets": ["6GiB", "4GiB", "2560MiB"]},
    "qwen2.5-0.5b": {"global_batch": 8, "seq_len": 512, "budgets": ["24GiB", "16GiB", "12GiB"]},
}
# a model compiled as a whole: planned over torch.compile's activation memory
# budget; ``options`` are the plan's further keywords (the user's precision, the variants)
COMPILED_CASES: dict[str, dict[str, Any]] = {
    "benchmarks/models/compiled_gpt2.py:make_model": {
        "global_batch": 8,
        "seq_len": 1024,
        "budgets": ["8GiB"],
        "options": {"precision": "bf16-mixed", "optimizers": ("adamw-fused",)},
    },
}


def make_plans(out: Path, only: list[str] | None, compiled: bool = False) -> None:
    import memfit
    from memfit.planner import plan

    rows = json.loads(out.read_text())["rows"] if out.exists() else []
    done = {(r["model"], r["budget"]) for r in rows}
    for model, case in (COMPILED_CASES if compiled else CASES).items():
        if only and model not in only:
            continue
        for budget in case["budgets"]:
            if (model, budget) in done:
                continue
            started = time.perf_counter()
            result = plan(
                model,
                budget=budget,
                global_batch=case["global_batch"],
                batch_size=case["global_batch"],
                seq_len=case.get("seq_len"),
                **case.get("options", {}),
            )
            seconds = time.perf_counter() - started
            rows.append(
                {
                    "model": model,
                    "budget": budget,
                    "seconds": seconds,
                    "plan": result.to_dict(),
                    "case": case,
                }
            )
            print(f"{model:26s} {budget:8s} {seconds:5.1f} s  {result}", flush=True)
            meta = {
                "date": dt.date.today().isoformat(),
                "memfit": memfit.__version__,
                "command": " ".join(sys.argv),
                "cpu": os.cpu_count(),
            }
            out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")


def measure_one(row: dict[str, Any], steps: int) -> dict[str, Any]:
    """In a child process with the budget's cap set: memfit's loop, then memfit.apply."""
    import torch
    from step_times import measure

    from memfit._gpus import resolve_gpu
    from memfit._units import parse_size

    chosen = row["plan"]["chosen"]
    context = resolve_gpu("h200").context
    cap = parse_size(row["budget"]) - context
    torch.cuda.set_per_process_memory_fraction(
        cap / torch.cuda.get_device_properties(0).total_memory
    )
    settings = _settings(row, chosen)
    out: dict[str, Any] = {"cap": cap}
    part = os.environ.get("MEMFIT_PROOF_PART", "both")  # measure_all: one process each
    if part in ("both", "loop"):
        history = os.environ.get("MEMFIT_PROOF_LOOP_HISTORY")  # ``measure --history DIR``
        if history:
            torch.cuda.memory._record_memory_history(
                context=None, stacks="python", max_entries=2_000_000
            )
        out["loop"] = measure(row["model"], settings, steps)
        if history:
            _dump_history(history)
    if part in ("both", "applied") and not row.get("loop_only"):  # a contender: the loop only
        # what a loop's run left behind goes first (on 2026-12-03 ResNet-50's checkpointed
        # blocks' parameters, 94 MB, were still allocated when the applied steps began);
        # whatever a collection does not free is recorded
        gc.collect()
        torch.cuda.empty_cache()
        out["leftover"] = torch.cuda.memory_allocated()
        out["applied"] = _applied(row, steps)
    return out


def chosen_row(plans: Path, which: str) -> dict[str, Any]:
    """The row of ``plans`` for ``MODEL@BUDGET``; exits where it has no chosen plan."""
    model, _, budget = which.rpartition("@")
    rows = read_json(plans)["rows"]
    row = next((r for r in rows if r["model"] == model and r["budget"] == budget), None)
    if row is None or row["plan"]["chosen"] is None:
        raise SystemExit(f"no chosen plan for {which!r} in {plans}")
    return row


def _settings(row: dict[str, Any], chosen: dict[str, Any]) -> dict[str, Any]:
    case = _case(row)
    settings = {
        "batch_size": chosen["micro_batch"],
        "accumulation": chosen["accumulation"],
        "precision": chosen["precision"],
        "activation_checkpointing": chosen["activation_checkpointing"],
        "optimizer": chosen["optimizer"],
    }
    if case.get("seq_len"):
        settings["seq_len"] = case["seq_len"]
    if chosen.get("activation_memory_budget") is not None:  # a compiled model's
        settings["activation_memory_budget"] = chosen["activation_memory_budget"]
    if chosen.get("offload"):  # activation offload's share
        settings["offload"] = chosen["offload"]
    if chosen.get("offload_checkpoints"):  # the checkpointed blocks' inputs offloaded too
        settings["offload_checkpoints"] = True
    notes = row["plan"].get("notes", [])
    if any("the whole batch the step is given" in n for n in notes):  # planned with it held
        settings["batch_held"] = True
    return settings


def _applied(row: dict[str, Any], steps: int) -> dict[str, Any]:
    """The plan applied with memfit.apply to a model and AdamW built as a user would, and its
    step run on full batches of the global size."""
    import torch

    import memfit
    from memfit.planner import Plan
    from memfit.technique.eight_bit import eight_bit_class
    from memfit.workload import make_workload

    case = _case(row)
    result: dict[str, Any] = {}
    try:
        workload = make_workload(
            row["model"], batch_size=case["global_batch"], seq_len=case.get("seq_len"), gpu="h200"
        )
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        with torch.device("cuda"):
            model = workload.build_model()
        model.train()
        name = row["plan"]["chosen"]["optimizer"]
        if name.endswith("-8bit"):  # what a user of 8-bit states builds: bitsandbytes'
            optimizer = eight_bit_class(name)(model.parameters(), lr=1e-4)
        else:
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        plan = _plan_from(row["plan"], Plan)
        step = memfit.apply(model, optimizer, plan, loss_fn=workload.loss_fn)
        history = os.environ.get("MEMFIT_PROOF_HISTORY")  # ``measure --history DIR``
        if history:  # no Python stacks: with them torch 2.11 breaks a checkpointed backward
            torch.cuda.memory._record_memory_history(
                context=None, stacks="python", max_entries=2_000_000
            )
        times, retries = [], []
        for _ in range(steps):
            batch = _to_cuda(workload.make_batch())
            torch.cuda.synchronize()
            started = time.perf_counter()
            step(batch)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - started)
            retries.append(torch.cuda.memory_stats().get("num_alloc_retries", 0))
        result.update(
            step_seconds=statistics.median(times[2:]),
            all_step_seconds=[round(t, 5) for t in times],
            # the allocator's cache frees after each step, counted from the model's build
            alloc_retries=retries,
            peak_allocated=torch.cuda.max_memory_allocated(),
            peak_reserved=torch.cuda.max_memory_reserved(),
        )
        if history:
            _dump_history(history)
    except Exception as exc:  # an OOM is the result, not a crash
        result["error"] = f"{type(exc).__name__}: {exc}"[:600]
    return result


def _dump_history(path: str) -> None:
    """The allocator's history since recording began, to ``path``; recording stops."""
    import gzip
    import pickle

    import torch

    with gzip.open(path, "wb") as f:
        pickle.dump(torch.cuda.memory._snapshot(), f)
    torch.cuda.memory._record_memory_history(enabled=None)


def _plan_from(data: dict[str, Any], plan_type: Any) -> Any:
    from memfit.planner import Candidate, Evaluated

    def evaluated(d: dict[str, Any] | None) -> Any:
        if d is None:
            return None
        c = Candidate(
            d["micro_batch"],
            d["accumulation"],
            d["precision"],
            d["activation_checkpointing"],
            d["optimizer"],
            d["allocator_config"],
            d.get("activation_memory_budget"),
            d.get("offload", 0.0),
            d.get("offload_checkpoints", False),
        )
        return Evaluated(
            c,
            d["peak_allocated"],
            d["peak_reserved"],
            d["needed"],
            d["step_seconds"],
            d["samples_per_second"],
            d["tokens_per_second"],
            d["bound"],
            d["fits"],
            tuple(d["changes"]),
            runs_in=d.get("runs_in"),
            cache_frees=d.get("cache_frees", 0),
        )

    return plan_type(
        model=data["model"],
        model_key=data["model_key"],
        budget=data["budget"],
        usable=data["usable"],
        margin=data["margin"],
        global_batch=data["global_batch"],
        seq_len=data["seq_len"],
        chosen=evaluated(data["chosen"]),
        candidates=[],
        baseline=evaluated(data["baseline"]),
    )


def _case(row: dict[str, Any]) -> dict[str, Any]:
    """The workload of a row: its own ``case`` (``in_backward_proof.py``'s), else ``CASES``'."""
    return row.get("case") or CASES[row["model"]]


def _to_cuda(batch: Any) -> Any:
    import torch
    from torch.utils._pytree import tree_map

    return tree_map(lambda t: t.cuda() if isinstance(t, torch.Tensor) else t, batch)


def measure_all(
    plans: Path,
    out: Path,
    steps: int,
    only: list[str] | None = None,
    history: Path | None = None,
) -> None:
    """``only``: the plans of these models, or of ``MODEL@BUDGET``; ``history``: a directory
    for the allocator history of each applied step (``apply-MODEL-BUDGET.pickle.gz``)."""
    import torch

    rows = read_json(plans)["rows"]
    measured = []
    for i, row in enumerate(rows):
        if only and row["model"] not in only and f"{row['model']}@{row['budget']}" not in only:
            continue
        if row["plan"]["chosen"] is None:
            measured.append({"model": row["model"], "budget": row["budget"], "skipped": "no plan"})
            continue
        env = dict(os.environ)
        alloc = row["plan"]["chosen"]["allocator_config"]
        if alloc:
            env["PYTORCH_CUDA_ALLOC_CONF"] = alloc
        if history is not None:
            history.mkdir(parents=True, exist_ok=True)
            name = f"apply-{row['model']}-{row['budget']}".replace(":", "_").replace("/", "_")
            env["MEMFIT_PROOF_HISTORY"] = str(history / f"{name}.pickle.gz")
            env["MEMFIT_PROOF_LOOP_HISTORY"] = str(history / f"{name}.pickle.gz").replace(
                "apply-", "loop-"
            )
        cmd = [
            sys.executable,
            __file__,
            "child",
            str(plans),
            "--index",
            str(i),
            "--steps",
            str(steps),
        ]
        # memfit's loop and the applied step each in a fresh process, as a user's job runs:
        # in one process (2026-12-03) the applied step's reserved peak depended on what the
        # loop left allocated (65 MiB of handles' workspaces in the expandable segment of
        # ResNet-50's and ViT-B/16's plans: 80 MiB more mapped)
        got: dict[str, Any] = {}
        for part in ("loop", "applied"):
            proc = subprocess.run(
                cmd, env={**env, "MEMFIT_PROOF_PART": part}, capture_output=True, text=True
            )
            line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
            got.update(json.loads(line[7:]) if line else {part: {"error": proc.stderr[-1500:]}})
        measured.append({"model": row["model"], "budget": row["budget"], **got})
        loop = got.get("loop", {})
        applied = got.get("applied", {})
        print(
            f"{row['model']:26s} {row['budget']:8s} loop "
            f"{loop.get('step_seconds', float('nan')) * 1e3:7.1f} ms "
            f"{loop.get('error', '')[:60]} applied "
            f"{applied.get('step_seconds', float('nan')) * 1e3:7.1f} ms "
            f"{applied.get('error', '')[:80]}",
            flush=True,
        )
        meta = {
            "date": dt.date.today().isoformat(),
            "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "command": " ".join(sys.argv),
            "steps": steps,
        }
        out.write_text(json.dumps({"meta": meta, "rows": measured}, indent=1) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["plan", "measure", "child", "compare"])
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--index", type=int)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--history", type=Path, help="measure: record each applied step here")
    parser.add_argument("--compiled", action="store_true", help="plan COMPILED_CASES")
    args = parser.parse_args()
    if args.what == "plan":
        make_plans(args.out, args.only, args.compiled)
    elif args.what == "measure":
        measure_all(args.paths[0], args.out, args.steps, args.only, args.history)
    elif args.what == "child":
        row = read_json(args.paths[0])["rows"][args.index]
        print("RESULT " + json.dumps(measure_one(row, args.steps)))
    else:
        from plan_compare import compare

        compare(*args.paths, out=args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
