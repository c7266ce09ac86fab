"""The plans' predicted step times under a calibration of the GPU host they ran on against their
measured times (is the host's cost per op what keeps host-bound steps off?).

    PYTHONPATH=src python benchmarks/refit_check.py PLANS.json MEASURED.json [--calibration F]

Each plan's chosen configuration is traced as the planner traces a candidate and its step
time predicted with the shipped calibration, or with ``--calibration`` (a file
``calibration_fit.py`` wrote) in its place; printed beside the time ``memfit.apply``'s step
took (``plan_proof.py measure``), with the error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from results_io import read_json

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("plans", type=Path)
    parser.add_argument("measured", type=Path)
    parser.add_argument("--calibration", type=Path)
    args = parser.parse_args()
    from plan_proof import _settings

    from memfit._gpus import resolve_gpu
    from memfit.planner import _step_time, candidate_costs, step_time_of
    from memfit.workload import make_workload

    if args.calibration is not None:
        data = json.loads(args.calibration.read_text())
        _step_time._shipped.cache_clear()
        _step_time._shipped = lambda: {data["key"]: data}  # type: ignore[assignment]
    measured = {(r["model"], r["budget"]): r for r in json.loads(args.measured.read_text())["rows"]}
    within = total = 0
    for row in read_json(args.plans)["rows"]:
        got = measured.get((row["model"], row["budget"]), {}).get("applied", {})
        if "step_seconds" not in got:
            continue
        w = make_workload(row["model"], gpu="h200", **_settings(row, row["plan"]["chosen"]))
        costs, traced = candidate_costs(w, resolve_gpu("h200"))
        t = step_time_of(w, costs, traced, resolve_gpu("h200"))
        err = t.seconds / got["step_seconds"] - 1
        within += abs(err) <= 0.15
        total += 1
        print(
            f"{row['model']:26s} {row['budget']:8s} predicted {t.seconds * 1e3:7.1f} ms "
            f"({t.bound}) measured {got['step_seconds'] * 1e3:7.1f} ms {100 * err:+5.0f}%",
            flush=True,
        )
    print(f"within 15%: {within} of {total}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
