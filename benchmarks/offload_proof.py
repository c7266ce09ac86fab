"""Activation offload on the GPU: step times and peaks of memfit's offload beside no offload,
full checkpointing and PyTorch's ``save_on_cpu``.

    PYTHONPATH=src python benchmarks/offload_proof.py --out FILE.json [--only MODEL ...] [--steps 8]

For each model of ``CASES`` (and ``CASES_2``), one process runs each configuration of its list
with memfit's step loop (``step_times.measure``: the median step after the first two, the
peaks), given one batch already on the GPU (the first runs, on 2026-12-02, made each step's
batch on the host instead), the cache emptied between them. ``save_on_cpu`` wraps the whole step in
``torch.autograd.graph.save_on_cpu(pin_memory=...)``: every tensor any op saves goes to the host
and comes back when the backward needs it, synchronously. The predicted step times of memfit's
configurations are ``op_predict.py``'s (on the CPU), compared in
results/2026-12-02-h200-activation-offload/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

BERT = {"batch_size": 32, "seq_len": 512}
GPT2 = {"batch_size": 8, "seq_len": 1024, "precision": "bf16-mixed"}
CASES: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "bert-base-uncased": [
        ("none", BERT),
        ("checkpointing", {**BERT, "activation_checkpointing": True}),
        ("offload 1", {**BERT, "offload": 1.0}),
        ("offload 0.5", {**BERT, "offload": 0.5}),
        (
            "checkpointing 0.5 + offload 1",
            {**BERT, "activation_checkpointing": 0.5, "offload": 1.0},
        ),
        ("save_on_cpu pinned", {**BERT, "save_on_cpu": True}),
        ("save_on_cpu", {**BERT, "save_on_cpu": False}),
    ],
    "gpt2": [
        ("none", GPT2),
        ("checkpointing", {**GPT2, "activation_checkpointing": True}),
        ("offload 1", {**GPT2, "offload": 1.0}),
        ("offload 0.5", {**GPT2, "offload": 0.5}),
    ],
    "tinyllama-1.1b": [
        (
            "offload 1",
            {"batch_size": 4, "seq_len": 2048, "precision": "bf16-mixed", "offload": 1.0},
        ),
    ],
    "tv:resnet50": [("offload 1", {"batch_size": 64, "offload": 1.0})],
    "timm:vit_base_patch16_224": [
        ("offload 0.5", {"batch_size": 64, "precision": "bf16-mixed", "offload": 0.5})
    ],
}
# held out for the step-time model: predicted before they ran
CASES_2: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "bert-large-uncased": [("offload 0.5", {"batch_size": 16, "seq_len": 512, "offload": 0.5})],
    "gpt2-medium": [
        (
            "checkpointing 0.5 + offload 1",
            {**GPT2, "activation_checkpointing": 0.5, "offload": 1.0},
        ),
    ],
    "qwen2.5-0.5b": [
        (
            "offload 0.5, accumulation 2",
            {
                "batch_size": 4,
                "seq_len": 2048,
                "precision": "bf16-mixed",
                "accumulation": 2,
                "offload": 0.5,
            },
        )
    ],
    "timm:convnext_tiny": [
        ("offload 1", {"batch_size": 64, "precision": "bf16-mixed", "offload": 1.0})
    ],
}


def run_model(model: str, steps: int) -> list[dict[str, Any]]:
    import torch
    from step_times import measure

    rows = []
    for name, settings in {**CASES, **CASES_2}[model]:
        pin = settings.get("save_on_cpu")
        memfit_settings = {k: v for k, v in settings.items() if k != "save_on_cpu"}
        context = (
            torch.autograd.graph.save_on_cpu(pin_memory=pin)
            if pin is not None
            else contextlib.nullcontext()
        )
        with context:
            row = measure(model, memfit_settings, steps, batch_on_gpu=True)
        row.update(model=model, variant=name, settings=settings)
        rows.append(row)
        shown = (
            f"{row['step_seconds'] * 1e3:8.1f} ms  alloc {row['peak_allocated'] / 2**30:6.2f} "
            f"GiB  reserved {row['peak_reserved'] / 2**30:6.2f} GiB"
            if "error" not in row
            else "ERROR " + row["error"][:200]
        )
        print(f"{model:28s} {name:32s} {shown}", flush=True)
    return rows


def predict(out: Path, only: list[str] | None, against: Path | None) -> int:
    """On the CPU: the step-time model's prediction of each of memfit's configurations (the
    batch on the GPU, as ``op_predict.py``), beside the measured loop's step where given."""
    from op_predict import predict as predicted

    measured = {}
    if against is not None:
        for row in json.loads(against.read_text())["rows"]:
            if "step_seconds" in row:
                measured[(row["model"], row["variant"])] = row["step_seconds"]
    rows = []
    for model, variants in {**CASES, **CASES_2}.items():
        if only and model not in only:
            continue
        for name, settings in variants:
            if "save_on_cpu" in settings:
                continue
            row = {**predicted(model, settings), "variant": name}
            real = measured.get((model, name))
            if real is not None:
                row["measured_seconds"] = real
                row["error"] = row["seconds"] / real - 1
            rows.append(row)
            print(
                f"{model:28s} {name:32s} predicted {row['seconds'] * 1e3:7.1f} ms"
                + (f"  measured {real * 1e3:7.1f}  {row['error']:+.0%}" if real else ""),
                flush=True,
            )
    meta = {"date": dt.date.today().isoformat(), "command": " ".join(sys.argv)}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--predict", action="store_true", help="on the CPU: the model's predicted step times"
    )
    parser.add_argument("--against", type=Path, help="with --predict: measured times to compare")
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.predict:
        return predict(args.out, args.only, args.against)
    if args.child:
        print("RESULT " + json.dumps(run_model(args.child, args.steps)), flush=True)
        return 0
    import torch

    rows: list[dict[str, Any]] = []
    for model in {**CASES, **CASES_2}:
        if args.only and model not in args.only:
            continue
        cmd = [sys.executable, __file__, "--out", str(args.out), "--child", model]
        cmd += ["--steps", str(args.steps)]
        start = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        shown = [ln for ln in proc.stdout.splitlines() if not ln.startswith("RESULT ")]
        print("\n".join(shown), flush=True)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            rows.append({"model": model, "error": proc.stderr[-3000:]})
        else:
            rows.extend(json.loads(line[len("RESULT ") :]))
        print(f"{model}: {time.time() - start:.0f} s", flush=True)
        meta = {  # written after each model: a call's time limit keeps what was measured
            "date": dt.date.today().isoformat(),
            "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "command": " ".join(sys.argv),
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
