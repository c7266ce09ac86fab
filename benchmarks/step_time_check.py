"""The planner's step-time model against step times measured on the GPU.

    PYTHONPATH=src python benchmarks/step_time_check.py MEASURED ... [--out FILE.json]
        [--only MODEL ...] [--calibration NAME=FILE ...]

``MEASURED`` are ``plan_trials.py`` JSONL files or ``step_times.py`` JSON files. Each measured
configuration is traced on this CPU as the planner traces a candidate (``memfit.planner``'s
``candidate_costs``: at most two micro-batches, scaled) and its step time predicted with the
shipped calibration. Printed per row: measured, predicted, error; then per model the median
absolute error, the share within 15%, and how many pairs of its configurations the prediction
orders as the GPU does (pairs closer than 5% on the GPU are not counted: that is the noise);
then the same over every model, for the shipped calibration and each ``--calibration NAME=FILE``
(``calibration_fit.py``'s output, predicted beside it from the same trace: the host-cost refit
was compared so, on ``host_costs.py validate``'s rows).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
from pathlib import Path
from typing import Any


def load(paths: list[Path]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in paths:
        if path.suffix == ".jsonl":
            rows += [json.loads(line) for line in path.open()]
        else:
            rows += json.loads(path.read_text())["rows"]
    return [r for r in rows if "step_seconds" in r]


def predict(row: dict[str, Any], calibrations: dict[str, Any]) -> dict[str, float]:
    """The row's predicted step under each calibration (``shipped``: memfit's), traced once."""
    from memfit._gpus import resolve_gpu
    from memfit.planner import candidate_costs
    from memfit.planner._search import _predict
    from memfit.workload import make_workload

    workload = make_workload(row["model"], gpu="h200", **row["settings"])
    costs, traced = candidate_costs(workload, resolve_gpu("h200"))
    return {n: _predict(workload, costs, traced, c).seconds for n, c in calibrations.items()}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("measured", type=Path, nargs="+")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--only", nargs="*")
    parser.add_argument(
        "--calibration",
        nargs="*",
        default=[],
        help="NAME=FILE: calibration_fit.py's output, predicted beside the shipped one",
    )
    args = parser.parse_args()
    from memfit._gpus import resolve_gpu
    from memfit.planner import Calibration
    from memfit.planner._step_time import calibration_for

    calibrations = {"shipped": calibration_for(resolve_gpu("h200"))[0]}
    for spec in args.calibration:
        name, _, path = spec.partition("=")
        calibrations[name] = Calibration.from_dict(json.loads(Path(path).read_text()))
    rows = [r for r in load(args.measured) if not args.only or r["model"] in args.only]
    for row in rows:
        row["predicted"] = predict(row, calibrations)
        row["predicted_seconds"] = row["predicted"]["shipped"]
        what = ", ".join(f"{k}={v}" for k, v in row["settings"].items() if k != "seq_len")
        shown = " ".join(
            f"{t * 1e3:7.1f} ms {100 * (t / row['step_seconds'] - 1):+5.0f}%"
            for t in row["predicted"].values()
        )
        print(
            f"{row['model']:26s} {what:100s} {row['step_seconds'] * 1e3:7.1f} {shown}", flush=True
        )
    print()
    for model in sorted({r["model"] for r in rows}):
        mine = [r for r in rows if r["model"] == model]
        errors = [abs(r["predicted_seconds"] / r["step_seconds"] - 1) for r in mine]
        pairs = [
            (a, b)
            for a, b in itertools.combinations(mine, 2)
            if abs(a["step_seconds"] / b["step_seconds"] - 1) > 0.05
        ]
        right = sum(
            (a["step_seconds"] < b["step_seconds"])
            == (a["predicted_seconds"] < b["predicted_seconds"])
            for a, b in pairs
        )
        within = sum(e <= 0.15 for e in errors)
        print(
            f"{model:26s} median |error| {100 * statistics.median(errors):4.1f}%, "
            f"within 15%: {within}/{len(mine)}, pairs ordered: {right}/{len(pairs)}"
        )
    print()
    for name in calibrations:  # every model's rows together
        errors = [abs(r["predicted"][name] / r["step_seconds"] - 1) for r in rows]
        pairs = [
            (a, b)
            for a, b in itertools.combinations(rows, 2)
            if a["model"] == b["model"] and abs(a["step_seconds"] / b["step_seconds"] - 1) > 0.05
        ]
        right = sum(
            (a["step_seconds"] < b["step_seconds"]) == (a["predicted"][name] < b["predicted"][name])
            for a, b in pairs
        )
        print(
            f"{name:12s} median |error| {100 * statistics.median(errors):4.1f}%, within 15%: "
            f"{sum(e <= 0.15 for e in errors)}/{len(errors)}, pairs ordered {right}/{len(pairs)}"
        )
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
