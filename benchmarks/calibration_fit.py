"""Turn ``calibrate_gpu.py``'s measurements into the calibration memfit ships (issue 13).

    PYTHONPATH=src python benchmarks/calibration_fit.py CALIBRATION.json --key h200 \
        --out src/memfit/planner/data/h200.json

The GPU's curves are copied as measured (from the last file given that measured the whole set;
several files' tiny workloads are pooled). The convolutions' per-class curves
(``conv:<class>:<dtype>``, timed in CUDA graphs: ``calibrate_gpu.py --only conv`` makes such a
file alone) come from the last file that has them, listed in the shipped ``graph_timed``; a set
of files with none ships what it did before they existed. The host's cost of an op comes from
the tiny workloads: each is traced here with ``costs=True``, and each phase's measured seconds
are divided by the ops the trace dispatched in it (views and read-backs included: the host
issues them too).
Per phase and style of step (``eager``: mixed precision, ``fp32``, ``checkpointed``,
``selective``), the median over the tiny models. The optimizer's host time is fitted as seconds
per op plus seconds per parameter tensor (its Python loops over the parameters), by least
squares over every tiny row.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

STYLES = {
    "fp32": "fp32",
    "bf16-mixed": "eager",
    "bf16-mixed, fused": "eager",
    "bf16-mixed, checkpointing": "checkpointed",
    "bf16-mixed, selective": "selective",
}


def op_counts(model: str, settings: dict[str, Any]) -> tuple[dict[str, int], int]:
    from calibrate_gpu import tiny_workload

    from memfit._gpus import resolve_gpu
    from memfit.trace import trace_workload

    workload = dataclasses.replace(tiny_workload(model, 3), **settings)
    costs = trace_workload(workload, resolve_gpu("h200"), costs=True).costs
    assert costs is not None
    counts = {
        name.partition(".")[2]: len(cost.ops)
        for name, cost in costs.phases.items()
        if name.startswith("step2.")
    }
    return counts, costs.parameter_tensors


def is_class_curve(key: str) -> bool:
    """``conv:k3s2:bf16`` and ``conv_bwd:k1:fp32`` are; ``conv:bf16`` and ``mm:bf16`` not."""
    return key.startswith(("conv:", "conv_bwd:")) and key.count(":") == 2


def shipped_curves(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The curves to ship (``curves``, and ``graph_timed``, ``conv_source`` when per-class
    convolution curves were measured) from calibration files in the order given: the general
    ones of the last complete file (it has ``kernel_floor_seconds``), the per-class ones of the
    last file that has any."""
    complete = [run for run in runs if "kernel_floor_seconds" in run]
    if not complete:
        raise SystemExit("no complete calibration among the files (run calibrate_gpu.py whole)")
    curves = {
        k: v for k, v in complete[-1]["curves"].items() if k != "mem" and not is_class_curve(k)
    }
    out: dict[str, Any] = {"curves": curves}
    per_class = [run for run in runs if any(map(is_class_curve, run["curves"]))]
    if per_class:
        run = per_class[-1]
        if run["meta"]["gpu"] == "cpu":
            raise SystemExit(
                f"the convolution curves of {run['meta']['command']!r} were measured on the CPU "
                "(--device cpu checks the script's logic): run calibrate_gpu.py on the GPU"
            )
        classes = {k: v for k, v in run["curves"].items() if is_class_curve(k)}
        curves.update(classes)
        out["graph_timed"] = sorted(k for k in run.get("graph_timed", ()) if k in classes)
        meta = run["meta"]
        out["conv_source"] = f"measured {meta['date']}, torch {meta['torch']}, on {meta['gpu']}"
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "calibration", type=Path, nargs="+", help="curves from the last complete one"
    )
    parser.add_argument("--key", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--kernel-floor", type=float, help="seconds; default: the measured one")
    args = parser.parse_args()
    runs = [json.loads(path.read_text()) for path in args.calibration]
    shipped = shipped_curves(runs)
    measured = [run for run in runs if "kernel_floor_seconds" in run][-1]
    per: dict[str, list[float]] = {}
    optimizer_rows: list[tuple[int, int, float]] = []
    for row in [row for run in runs for row in run.get("tiny", ())]:
        if "phase_seconds" not in row:
            continue
        counts, params = op_counts(row["model"], row["settings"])
        style = STYLES[row["variant"]]
        for phase, seconds in row["phase_seconds"].items():
            if phase == "optimizer":
                optimizer_rows.append((params, counts[phase], seconds))
            elif counts.get(phase):
                per.setdefault(f"{phase}:{style}", []).append(seconds / counts[phase])
        print(f"{row['model']:14s} {row['variant']:26s} ops {counts}", flush=True)
    host = {k: statistics.median(v) for k, v in per.items()}
    for phase in ("input", "forward", "backward", "zero_grad"):
        host[phase] = host.pop(f"{phase}:eager")
    a = np.array([[p, n] for p, n, _ in optimizer_rows], dtype=float)
    t = np.array([s for _, _, s in optimizer_rows])
    per_param, per_op = np.linalg.lstsq(a, t, rcond=None)[0]
    host["optimizer_param"], host["optimizer"] = float(per_param), float(per_op)
    host["default"] = host["forward"]
    mem = measured["curves"]["mem"]
    floor = args.kernel_floor or measured.get("kernel_floor_seconds")
    bandwidth = mem[-1][0] / (mem[-1][1] - floor)
    meta = measured["meta"]
    out = {
        "key": args.key,
        "gpu": meta["gpu"],
        "source": f"measured {meta['date']}, torch {meta['torch']}, CUDA {meta['cuda']}",
        "command": " ".join(sys.argv),
        "curves": shipped["curves"],
        **{k: v for k, v in shipped.items() if k != "curves"},
        "kernel_floor": floor,
        "bandwidth": bandwidth,
        "h2d_seconds_per_byte": measured["input_seconds_per_byte"]["h2d"],
        "host": {k: round(v, 9) for k, v in sorted(host.items())},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    for k, v in sorted(host.items()):
        print(f"host {k:24s} {v * 1e6:7.2f} us")
    print(f"bandwidth {bandwidth / 1e12:.2f} TB/s, kernel floor {floor * 1e6:.2f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
