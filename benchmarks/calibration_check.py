"""Step times measured on the GPU against the step-time model under several calibrations, each
configuration traced once (session 21: refitting the host's cost of an op on real models).

    PYTHONPATH=src python benchmarks/calibration_check.py MEASURED.jsonl \\
        --calibration NAME=FILE ... [--only MODEL ...] [--out FILE.json]

``MEASURED``: ``host_costs.py validate``'s rows (or any JSON lines with ``model``, ``settings``
and ``step_seconds``). ``shipped`` (the calibration memfit ships) is always among those
compared. Printed per row: measured, each calibration's prediction and error; then per
calibration the median absolute error, the share within 15%, and the pairs of configurations of
one model the prediction orders as the GPU does (pairs closer than 5% on the GPU not counted).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
from pathlib import Path
from typing import Any


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("measured", type=Path)
    parser.add_argument("--calibration", nargs="*", default=[], help="NAME=FILE")
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from memfit._gpus import resolve_gpu
    from memfit.planner import Calibration, candidate_costs
    from memfit.planner._search import _predict
    from memfit.planner._step_time import calibration_for
    from memfit.workload import make_workload

    gpu = resolve_gpu("h200")
    calibrations = {"shipped": calibration_for(gpu)[0]}
    for spec in args.calibration:
        name, _, path = spec.partition("=")
        calibrations[name] = Calibration.from_dict(json.loads(Path(path).read_text()))
    rows: list[dict[str, Any]] = []
    for line in args.measured.open():
        row = json.loads(line)
        if not row.get("step_seconds") or (args.only and row["model"] not in args.only):
            continue
        settings = row["settings"]
        workload = make_workload(row["model"], gpu="h200", **settings)
        costs, traced = candidate_costs(workload, gpu)
        row["predicted"] = {
            name: _predict(workload, costs, traced, cal).seconds
            for name, cal in calibrations.items()
        }
        rows.append(row)
        what = " ".join(f"{k}={v}" for k, v in settings.items() if k != "seq_len")
        shown = " ".join(
            f"{name} {t * 1e3:6.1f} ({100 * (t / row['step_seconds'] - 1):+4.0f}%)"
            for name, t in row["predicted"].items()
        )
        print(f"{row['model'][:16]:16s} {what[:90]:90s} {row['step_seconds'] * 1e3:6.1f} {shown}")
    print()
    summary = {}
    for name in calibrations:
        errors = [abs(r["predicted"][name] / r["step_seconds"] - 1) for r in rows]
        right = total = 0
        for a, b in itertools.combinations(rows, 2):
            if a["model"] != b["model"]:
                continue
            ta, tb = a["step_seconds"], b["step_seconds"]
            if abs(ta / tb - 1) < 0.05:
                continue
            total += 1
            right += (ta < tb) == (a["predicted"][name] < b["predicted"][name])
        summary[name] = {
            "median_abs_error": statistics.median(errors),
            "within_15": sum(e <= 0.15 for e in errors) / len(errors),
            "pairs_ordered": [right, total],
        }
        print(
            f"{name:12s} median |error| {100 * statistics.median(errors):4.1f}%, within 15%: "
            f"{sum(e <= 0.15 for e in errors)}/{len(errors)}, pairs ordered {right}/{total}"
        )
    if args.out is not None:
        args.out.write_text(json.dumps({"rows": rows, "summary": summary}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
