"""Exhaustive GPU trial of the planner's search space (the planner's proof): every configuration of
each workload, run for real, its step time and peaks.

    PYTHONPATH=src python benchmarks/plan_trials.py --out DIR [--only MODEL ...] [--steps 5]

For each workload of ``WORKLOADS`` (a global batch), every combination of

* precision: bf16-mixed, fp32;
* activation checkpointing: none, selective, full;
* micro-batch: the global batch, 1/2, 1/4, 1/8 of it, with accumulation keeping the global batch;
* optimizer: AdamW foreach (PyTorch's default on CUDA) and fused,

(with ``--partial``, instead: partial checkpointing of 1/4, 1/2 and 3/4 of the blocks at
micro-batch 1 and 1/2 of the global batch, bf16-mixed, fused AdamW: the part of the planner's
space between none and full, sampled)

runs ``--steps`` steps of memfit's own loop (``step_times.measure``: median of the steps after
the first two, peaks). One process per workload; each configuration's row is appended to
``DIR/<model>.jsonl`` as soon as it is measured, so a run cut short keeps what it measured. The
fastest row per budget is the best a user would find by trying everything; ``plan_proof.py``
compares the plan's choice with it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from step_times import measure, shown

# the global batch (and sequence length) of each workload; budgets live in plan_proof.py
WORKLOADS: dict[str, dict[str, Any]] = {
    "bert-base-uncased": {"batch_size": 32, "seq_len": 512},
    "gpt2": {"batch_size": 16, "seq_len": 1024},
    "tinyllama-1.1b": {"batch_size": 8, "seq_len": 1024},
    "timm:vit_base_patch16_224": {"batch_size": 128},
    "tv:resnet50": {"batch_size": 128},
    "qwen2.5-0.5b": {"batch_size": 8, "seq_len": 512},
}
PRECISIONS = ("bf16-mixed", "fp32")
CHECKPOINTING: tuple[bool | str, ...] = (False, "selective", True)
SPLITS = (1, 2, 4, 8)
OPTIMIZERS = ("adamw", "adamw-fused")
FRACTIONS = (0.25, 0.5, 0.75)


def partial_grid(model: str) -> list[dict[str, Any]]:
    """The partial-checkpointing sample of ``model``'s space (see the docstring)."""
    base = WORKLOADS[model]
    return [
        {
            **base,
            "batch_size": base["batch_size"] // split,
            "accumulation": split,
            "precision": "bf16-mixed",
            "activation_checkpointing": fraction,
            "optimizer": "adamw-fused",
        }
        for split in (1, 2)
        for fraction in FRACTIONS
    ]


def grid(model: str) -> list[dict[str, Any]]:
    """Every configuration of ``model``'s workload, as make_workload settings."""
    base = WORKLOADS[model]
    out = []
    for precision, checkpointing, split, optimizer in itertools.product(
        PRECISIONS, CHECKPOINTING, SPLITS, OPTIMIZERS
    ):
        settings = {
            **base,
            "batch_size": base["batch_size"] // split,
            "accumulation": split,
            "precision": precision,
            "activation_checkpointing": checkpointing,
            "optimizer": optimizer,
        }
        out.append(settings)
    return out


def child(model: str, out: Path, steps: int, partial: bool) -> None:
    done = set()
    if out.exists():
        done = {json.dumps(json.loads(ln)["settings"], sort_keys=True) for ln in out.open()}
    for settings in partial_grid(model) if partial else grid(model):
        if json.dumps(settings, sort_keys=True) in done:
            continue
        row = {"model": model, "settings": settings, **measure(model, settings, steps)}
        row.pop("traceback", None)
        with out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        what = ", ".join(f"{k}={v}" for k, v in settings.items() if k not in WORKLOADS[model])
        print(f"{model:26s} {what:90s} {shown(row)}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--partial", action="store_true", help="the partial-checkpointing grid")
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.out / f"{_file(args.child)}.jsonl", args.steps, args.partial)
        return 0
    import torch

    args.out.mkdir(parents=True, exist_ok=True)
    meta = {
        "date": dt.date.today().isoformat(),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "steps": args.steps,
        "command": " ".join(sys.argv),
        "workloads": WORKLOADS,
    }
    (args.out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    for model in WORKLOADS:
        if args.only and model not in args.only:
            continue
        started = time.time()
        cmd = [sys.executable, __file__, "--out", str(args.out), "--child", model]
        cmd += ["--steps", str(args.steps)] + (["--partial"] if args.partial else [])
        proc = subprocess.run(cmd, text=True, capture_output=True)
        sys.stdout.write(proc.stdout)
        if proc.returncode:
            print(f"{model}: exit {proc.returncode}: {proc.stderr[-800:]}", flush=True)
        print(f"{model}: {time.time() - started:.0f} s", flush=True)
    return 0


def _file(model: str) -> str:
    return model.replace(":", "_").replace("/", "_")


if __name__ == "__main__":
    raise SystemExit(main())
