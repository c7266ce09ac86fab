"""The host's seconds per phase of real models' steps at inputs too small to keep the GPU busy
(the step-time model's cost of an op on the host).

    PYTHONPATH=src python benchmarks/host_costs.py measure --out FILE.json [--only MODEL ...]
    PYTHONPATH=src python benchmarks/host_costs.py count FILE.json --out COUNTS.json
    PYTHONPATH=src python benchmarks/host_costs.py validate VERSUS.json ... --out FILE.jsonl
    PYTHONPATH=src python benchmarks/host_costs.py check COUNTS.json [--calibration NAME=FILE ...]

The shipped calibration divides tiny two-layer models' phase seconds by the ops their traces
dispatch. Full-size models differ from them in the Python around their ops: Qwen2.5-0.5B's steps
were predicted about twice as slow on the host as they ran. ``measure`` (on the GPU) runs each
model of :data:`MODELS` at a batch of one and a short input in memfit's loop, under each
configuration of ``calibrate_gpu.TINY_VARIANTS``, one process per model, and keeps per phase
the median over steps 3-9 of two times: ``seconds``, the GPU synchronized at each phase
boundary, and ``issue_seconds``, from the phase's start until the host had issued its last op
(before that synchronization: the host's own time, its waits on the GPU's read-backs
included). The host's speed is probed beside each model (``host_probe.py``). ``count`` (on
the CPU) traces each measured configuration as the calibration fit does and writes, per phase,
the ops, the views among them, the convolution calls and the module calls (forward hooks), so
that a fit can weigh each. ``validate`` (on the GPU) runs every configuration earlier
``plan_versus.py`` calls ran, at its full size, uncapped, its batch on the GPU: the step times a
refitted model is checked against, on the same host as the host costs. ``check`` (on the CPU)
predicts the held-out models' phases from their counts under each calibration given.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

TEXT = {"batch_size": 1, "seq_len": 32}
# fitted on the first six; the rest are held out (models the fit has not seen)
MODELS: dict[str, dict[str, Any]] = {
    "gpt2": TEXT,
    "bert-base-uncased": TEXT,
    "qwen2.5-0.5b": TEXT,
    "tinyllama-1.1b": TEXT,
    "tv:resnet50": {"batch_size": 1},
    "timm:vit_base_patch16_224": {"batch_size": 1},
    "gpt2-medium": TEXT,
    "roberta-base": TEXT,
    "t5-small": TEXT,
    "timm:convnext_tiny": {"batch_size": 1},
    "tv:efficientnet_b0": {"batch_size": 1},
}
FITTED = (
    "gpt2",
    "bert-base-uncased",
    "qwen2.5-0.5b",
    "tinyllama-1.1b",
    "tv:resnet50",
    "timm:vit_base_patch16_224",
)
STEPS = 10


def measure_model(model: str) -> list[dict[str, Any]]:
    import torch
    from calibrate_gpu import TINY_VARIANTS, phase_times
    from host_probe import probe_seconds

    from memfit.workload import make_workload

    rows = []
    for name, variant in TINY_VARIANTS:
        row: dict[str, Any] = {"model": model, "variant": name, "settings": variant}
        try:
            workload = make_workload(model, gpu="h200", steps=STEPS, **MODELS[model], **variant)
            row["seconds"], row["issue_seconds"] = phase_times(workload)
            row["host_probe_seconds"] = probe_seconds()
        except Exception as exc:  # kept; the next configuration runs
            row["error"] = f"{type(exc).__name__}: {exc}"[:600]
            row["traceback"] = traceback.format_exc()[-1500:]
        torch.cuda.empty_cache()
        rows.append(row)
        shown = " ".join(
            f"{k} {v * 1e3:.1f}/{row['issue_seconds'][k] * 1e3:.1f}"
            for k, v in row.get("seconds", {}).items()
        )
        print(f"{model:26s} {name:28s} {shown or row.get('error', '')[:100]}", flush=True)
    return rows


def measure(args: argparse.Namespace) -> int:
    import torch

    if args.child:
        print("ROWS " + json.dumps(measure_model(args.child)))
        return 0
    from step_times import child_rows

    rows: list[dict[str, Any]] = []
    for model in MODELS:
        if not args.only or model in args.only:
            cmd = [sys.executable, __file__, "measure", "--out", str(args.out), "--child", model]
            rows.extend(child_rows(cmd, model))
    meta = {
        "date": dt.date.today().isoformat(),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "steps": STEPS,
        "command": " ".join(sys.argv),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    return 0


def counts_of(model: str, settings: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Per phase of step 2 of a measured configuration: the ops the trace dispatched, the
    views and convolution calls among them, and the module calls (``forward`` hooks, counted
    in a real eager run on the CPU: a checkpointed backward calls its blocks again); and the
    parameter tensors (under ``_``)."""
    import torch

    from memfit._gpus import resolve_gpu
    from memfit.trace import trace_workload
    from memfit.workload import StepHooks, make_workload, optimizer_for, prepare_model, run_steps

    workload = make_workload(model, gpu="h200", steps=3, **MODELS[model], **settings)
    costs = trace_workload(workload, resolve_gpu("h200"), costs=True).costs
    assert costs is not None
    calls: dict[str, int] = {}
    now = {"phase": ""}

    def pre(module: Any, args: Any) -> None:
        calls[now["phase"]] = calls.get(now["phase"], 0) + 1

    def phase(label: str) -> None:
        now["phase"] = label

    net = prepare_model(workload, "cpu")
    hooks = StepHooks(
        to_device=lambda b: b,
        autocast=lambda dtype: torch.autocast("cpu", dtype=dtype),
        grad_scaler=lambda: torch.amp.GradScaler("cpu", enabled=False),
        phase=phase,
    )
    handle = torch.nn.modules.module.register_module_forward_pre_hook(pre)
    try:
        run_steps(workload, net, optimizer_for(workload, net), hooks)
    finally:
        handle.remove()
    out: dict[str, dict[str, int]] = {}
    for name, cost in costs.phases.items():
        if not name.startswith("step2."):
            continue
        kinds = [kind for kind, _, _ in cost.ops]
        out[name.partition(".")[2]] = {
            "ops": len(kinds),
            "views": sum(k in ("view", "sync") for k in kinds),
            "convs": sum(k.startswith(("conv:", "conv_bwd:")) for k in kinds),
            "modules": calls.get(name, 0),
        }
    out["_"] = {"parameter_tensors": costs.parameter_tensors}
    return out


def count(args: argparse.Namespace) -> int:
    data = json.loads(args.measured.read_text())
    for row in data["rows"]:
        if "seconds" in row:
            row["counts"] = counts_of(row["model"], row["settings"])
            print(row["model"], row["variant"], row["counts"], flush=True)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    return 0


def check(args: argparse.Namespace) -> int:
    """The held-out models' phases (those not in :data:`FITTED`) against each calibration's
    host time for their ops: the cost per op of the phase and style, a convolution's extra, a
    fixed part where the calibration has one. Printed per row and summed up: the median
    absolute error, the share within 15% and the median signed error."""
    from calibration_fit import STYLES

    from memfit._gpus import resolve_gpu
    from memfit.planner import Calibration
    from memfit.planner._step_time import calibration_for

    calibrations = {"shipped": calibration_for(resolve_gpu("h200"))[0]}
    for spec in args.calibration:
        name, _, path = spec.partition("=")
        calibrations[name] = Calibration.from_dict(json.loads(Path(path).read_text()))
    errors: dict[str, list[float]] = {name: [] for name in calibrations}
    for row in json.loads(args.counted.read_text())["rows"]:
        counts = row.get("counts", {})
        if row["model"] in FITTED or not counts or "error" in counts:
            continue
        style = STYLES[row["variant"]]
        line = f"{row['model'][:18]:18s} {style:12s}"
        for phase in ("forward", "backward"):
            n, measured = counts[phase], row["issue_seconds"][phase]
            for name, cal in calibrations.items():
                predicted = (
                    cal.host_fixed(phase, style)
                    + cal.host_seconds(phase, style) * n["ops"]
                    + cal.host_per_conv(phase, style) * n["convs"]
                )
                errors[name].append(predicted / measured - 1)
                line += f" {phase[:3]} {name} {100 * errors[name][-1]:+4.0f}%"
        print(line)
    for name, errs in errors.items():
        print(
            f"{name}: median |error| {100 * statistics.median(map(abs, errs)):.1f}%, within 15% "
            f"{sum(abs(e) <= 0.15 for e in errs)}/{len(errs)}, median signed "
            f"{100 * statistics.median(errs):+.1f}%"
        )
    return 0


def configurations(paths: list[Path]) -> dict[str, list[dict[str, Any]]]:
    """The distinct configurations ``plan_versus.py`` ran (plans and contenders), by model."""
    out: dict[str, list[dict[str, Any]]] = {}
    for path in paths:
        for row in json.loads(path.read_text())["rows"]:
            for run in row.get("runs", []):
                settings = {k: v for k, v in run["settings"].items() if k != "batch_held"}
                if settings not in out.setdefault(row["model"], []):
                    out[row["model"]].append(settings)
    return out


def validate(args: argparse.Namespace) -> int:
    """Each configuration once, with no memory cap and its batch on the GPU (as
    ``plan_versus.py`` runs them), in one process per model; rows appended to ``--out`` (JSON
    lines) as they come, so that a cut run keeps what it measured."""
    from step_times import measure as measure_step

    if args.child:
        for settings in json.loads(args.child_settings):
            row = {"model": args.child, "settings": settings}
            row.update(measure_step(args.child, settings, 7, batch_on_gpu=True))
            row.pop("traceback", None)
            print("ROW " + json.dumps(row), flush=True)
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for model, runs in configurations(args.versus).items():
        if args.only and model not in args.only:
            continue
        cmd = [sys.executable, __file__, "validate", "--out", str(args.out), "--child", model]
        cmd += ["--child-settings", json.dumps(runs)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        rows = [ln[4:] for ln in proc.stdout.splitlines() if ln.startswith("ROW ")]
        with args.out.open("a") as f:
            f.writelines(r + "\n" for r in rows)
        for r in map(json.loads, rows):
            got = r.get("step_seconds")
            print(model, r["settings"], f"{got * 1e3:.1f} ms" if got else r.get("error"))
        if len(rows) < len(runs):
            print(f"{model}: {len(runs) - len(rows)} not run: {proc.stderr[-300:]}", flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--only", nargs="*")
    m.add_argument("--child")
    c = sub.add_parser("count")
    c.add_argument("measured", type=Path)
    c.add_argument("--out", type=Path, required=True)
    v = sub.add_parser("validate")
    v.add_argument("versus", type=Path, nargs="*", help="plan_versus.py results")
    v.add_argument("--out", type=Path, required=True)
    v.add_argument("--only", nargs="*")
    v.add_argument("--child")
    v.add_argument("--child-settings")
    k = sub.add_parser("check")
    k.add_argument("counted", type=Path, help="count's output")
    k.add_argument("--calibration", nargs="*", default=[], help="NAME=FILE")
    args = parser.parse_args()
    commands = {"measure": measure, "count": count, "validate": validate, "check": check}
    return commands[args.command](args)


if __name__ == "__main__":
    raise SystemExit(main())
