"""Steady-state step times and peaks of training configurations on the GPU: the ground truth a
planner's step-time model is calibrated and checked against.

    PYTHONPATH=src python benchmarks/step_times.py --out FILE.json [--only MODEL ...] [--steps 8]

For each model of ``CASES`` and each configuration of ``VARIANTS`` (precision, activation
checkpointing, a micro-batch half the size with two-way accumulation, the fused optimizer, the
optimizer stepped in backward), the
workload runs memfit's own step loop on the GPU (``run_steps``, as ``memfit validate`` runs it)
for ``--steps`` steps. Each step is timed from its first phase to the next step's, the GPU
synchronized at each boundary; the median of the steps after the first two is kept, with the
peaks (``max_memory_allocated``/``reserved``, reset for each configuration). One process per
model, configurations one after the other with the cache emptied between them. A configuration
memfit cannot set up (checkpointing on a torchvision model) is kept with its error.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import itertools
import json
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

CASES: dict[str, dict[str, Any]] = {
    "bert-base-uncased": {"batch_size": 32, "seq_len": 512},
    "gpt2": {"batch_size": 8, "seq_len": 1024},
    "tinyllama-1.1b": {"batch_size": 4, "seq_len": 2048},
    "timm:vit_base_patch16_224": {"batch_size": 64},
    "tv:resnet50": {"batch_size": 64},
}

VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("bf16-mixed", {"precision": "bf16-mixed"}),
    ("bf16-mixed, checkpointing", {"precision": "bf16-mixed", "activation_checkpointing": True}),
    (
        "bf16-mixed, selective checkpointing",
        {"precision": "bf16-mixed", "activation_checkpointing": "selective"},
    ),
    ("fp32", {"precision": "fp32"}),
    ("bf16-mixed, half micro-batch x 2", {"precision": "bf16-mixed", "half_micro": True}),
    ("bf16-mixed, fused AdamW", {"precision": "bf16-mixed", "optimizer": "adamw-fused"}),
    (
        "bf16-mixed, AdamW in backward",
        {"precision": "bf16-mixed", "optimizer": "adamw-in-backward"},
    ),
]


def run_case(
    model: str, base: dict[str, Any], steps: int, only: list[str] | None = None
) -> list[dict[str, Any]]:
    rows = []
    for name, variant in VARIANTS:
        if only and name not in only:
            continue
        settings = {**base, **{k: v for k, v in variant.items() if k != "half_micro"}}
        if variant.get("half_micro"):
            settings["batch_size"] = base["batch_size"] // 2
            settings["accumulation"] = 2
        row: dict[str, Any] = {"model": model, "variant": name, "settings": settings}
        row.update(measure(model, settings, steps))
        rows.append(row)
        print(f"{model:28s} {name:34s} {shown(row)}", flush=True)
    return rows


def measure(
    model: str, settings: dict[str, Any], steps: int, *, batch_on_gpu: bool = False
) -> dict[str, Any]:
    """Run ``steps`` steps of one configuration on the GPU: the median step time of the steps
    after the first two and the peaks; an error (an OOM) is returned as ``error``.
    ``batch_on_gpu``: one batch made and moved to the GPU before the steps, each step given
    it (the host's making and copying a batch left out, as a data loader does it beside)."""
    import torch
    from torch.utils._pytree import tree_map

    from memfit.technique.compilation import compiled_with_budget
    from memfit.workload import (
        StepHooks,
        held_view_on,
        make_workload,
        optimizer_for,
        prepare_model,
        run_steps,
    )

    row: dict[str, Any] = {}
    stack = contextlib.ExitStack()
    try:
        workload = make_workload(model, steps=steps, gpu="h200", **settings)
        if batch_on_gpu:
            ready = tree_map(_on_gpu, workload.make_batch())
            workload = dataclasses.replace(workload, make_batch=lambda: ready)
        # a compiled model compiles with it at its first call
        stack.enter_context(compiled_with_budget(workload.activation_memory_budget))
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        net = prepare_model(workload, "cuda")
        optimizer = optimizer_for(workload, net)
        # what building the model left cached goes, as memfit validate and memfit.apply let
        # it go and the estimate assumes (on 2026-12-03 Qwen2.5-0.5B's tied head left a 520 MiB
        # segment that took its 12 GiB plan's reserved 3.2% above the estimate)
        torch.cuda.empty_cache()
        marks: list[float] = []  # each step's first input phase, then the end
        started: set[str] = set()

        retries: list[int] = []  # the allocator's cache frees so far, at each step's start

        def phase(label: str) -> None:
            step = label.partition(".")[0]
            if label == "end" or (label.endswith(".input") and step not in started):
                started.add(step)
                torch.cuda.synchronize()
                marks.append(time.perf_counter())
                retries.append(torch.cuda.memory_stats().get("num_alloc_retries", 0))

        hooks = StepHooks(
            to_device=lambda b: tree_map(_on_gpu, b),
            autocast=lambda dtype: torch.autocast("cuda", dtype=dtype),
            grad_scaler=lambda: torch.amp.GradScaler("cuda"),
            phase=phase,
            # the caller's whole batch, held through the steps (``batch_held``), as traced
            held_view=held_view_on(workload, "cuda"),
        )
        run_steps(workload, net, optimizer, hooks)
        times = [b - a for a, b in itertools.pairwise(marks)]
        row.update(
            step_seconds=statistics.median(times[2:]),
            all_step_seconds=[round(t, 5) for t in times],
            peak_allocated=torch.cuda.max_memory_allocated(),
            peak_reserved=torch.cuda.max_memory_reserved(),
            alloc_retries=retries[1:],  # after each step
        )
        del net, optimizer, hooks
    except Exception as exc:  # kept in the results; the next configuration runs
        row["error"] = f"{type(exc).__name__}: {exc}"[:600]
        row["traceback"] = traceback.format_exc()[-2000:]
    finally:
        stack.close()
    torch.cuda.empty_cache()
    return row


def shown(row: dict[str, Any]) -> str:
    if "error" in row:
        return "ERROR " + row["error"][:120]
    return f"{row['step_seconds'] * 1e3:8.1f} ms  {row['peak_reserved'] / 2**30:6.2f} GiB"


def _on_gpu(value: Any) -> Any:
    import torch

    return value.to("cuda") if isinstance(value, torch.Tensor) else value


def child_rows(cmd: list[str], model: str) -> list[dict[str, Any]]:
    """Run ``cmd``, a child process measuring ``model``, and return the rows it printed on its
    ``ROWS`` line (its other output passed on); one row with its error if it printed none."""
    import subprocess

    proc = subprocess.run(cmd, capture_output=True, text=True)
    sys.stdout.write("".join(ln + "\n" for ln in proc.stdout.splitlines() if "ROWS" not in ln))
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("ROWS ")), None)
    if line is None:
        print(f"{model}: ERROR {proc.stderr[-300:]}", flush=True)
        return [{"model": model, "error": proc.stderr[-3000:]}]
    rows: list[dict[str, Any]] = json.loads(line[5:])
    return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--variants", nargs="*", help="configurations to run (default: all)")
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        rows = run_case(args.child, CASES[args.child], args.steps, args.variants)
        print("ROWS " + json.dumps(rows))
        return 0

    import torch

    rows: list[dict[str, Any]] = []
    for model in CASES:
        if args.only and model not in args.only:
            continue
        cmd = [sys.executable, __file__, "--out", str(args.out), "--child", model]
        cmd += ["--steps", str(args.steps)]
        if args.variants:
            cmd += ["--variants", *args.variants]
        rows.extend(child_rows(cmd, model))
    meta = {
        "date": dt.date.today().isoformat(),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "steps": args.steps,
        "command": " ".join(sys.argv),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
