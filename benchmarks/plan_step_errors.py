"""The chosen plans' predicted step times against their configurations measured.

    python benchmarks/plan_step_errors.py PLANS.json CHECK.json [...]

``PLANS`` is ``plan_proof.py``'s plans (``rows`` of ``{"model", "budget", "plan"}``), ``CHECK``
``step_time_check.py --out`` files, whose rows carry each configuration's measured seconds and
its predictions under every calibration compared. Printed: per calibration, how many chosen
plans' configurations came within 15% and the median error; then each plan's errors.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

from results_io import read_json


def _key(model: str, s: dict[str, Any]) -> tuple[Any, ...]:
    return (
        model,
        s.get("batch_size") or s.get("micro_batch"),
        s.get("accumulation", 1),
        s.get("precision"),
        str(s.get("activation_checkpointing")),
        s.get("optimizer"),
    )


def main(plans_path: str, checks: list[str]) -> int:
    plans = read_json(plans_path)["rows"]
    measured = {}
    for path in checks:
        for row in json.loads(Path(path).read_text()):
            measured[_key(row["model"], row["settings"])] = row
    found = []
    for row in plans:
        check = measured.get(_key(row["model"], row["plan"]["chosen"]))
        if check is None:
            print(f"not measured: {row['model']} at {row['budget']}")
            continue
        found.append((row["model"], row["budget"], check["step_seconds"], check["predicted"]))
    if not found:
        return 1
    names = list(found[0][3])
    for name in names:
        errors = [abs(p[name] / s - 1) for _, _, s, p in found]
        within = sum(e <= 0.15 for e in errors)
        median = statistics.median(errors) * 100
        print(f"{name}: {within} of {len(errors)} within 15%, median {median:.1f}%")
    for model, budget, seconds, predicted in found:
        cells = " ".join(f"{n}={predicted[n] / seconds - 1:+.0%}" for n in names)
        print(f"{model:28s} {budget:8s} {seconds * 1e3:7.1f} ms  {cells}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], sys.argv[2:]))
