"""The step-time model's predictions of ``op_profile.py``'s configurations, and their errors.

    PYTHONPATH=src python benchmarks/op_predict.py --held-out --out PREDICTIONS.json
    PYTHONPATH=src python benchmarks/op_predict.py --against DIR [DIR ...] [--predictions F]

The first form predicts, on this CPU with the shipped calibration, the step of each
configuration of ``op_profile.py``'s ``HELD_OUT`` (or ``--plans``/``--extra``) given its batch
on the GPU (the input phase left out, as ``op_profile.py``'s ``on_gpu`` runs it), and writes
them before the GPU runs them. The second compares predictions (made now, or read from
``--predictions``) with the ``on_gpu`` step times of one or more ``op_profile.py`` outputs:
per configuration the measured and predicted milliseconds, the error, whether the model
predicts it bound by the host or the GPU; then how many are within 15%.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

from results_io import profile_paths, read_json

sys.path.insert(0, str(Path(__file__).parent))


def key(model: str, settings: dict[str, Any]) -> str:
    return f"{model} {json.dumps(settings, sort_keys=True)}"


def predict(model: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The predicted step (seconds, the GPU's and the host's busy seconds, the bound side)."""
    from memfit._gpus import resolve_gpu
    from memfit.planner import candidate_costs, step_time_of
    from memfit.workload import make_workload

    gpu = resolve_gpu("h200")
    workload = make_workload(model, gpu="h200", **settings)
    costs, traced = candidate_costs(workload, gpu)
    step = step_time_of(workload, costs, traced, gpu)
    return {
        "model": model,
        "settings": settings,
        "seconds": step.seconds - step.phases.get("input", 0.0),
        "gpu_busy": step.gpu_busy,
        "host_busy": step.host_busy,
        "bound": step.bound,
    }


def measured(dirs: list[Path]) -> dict[str, list[dict[str, Any]]]:
    """Each configuration's rows of ``op_profile.py`` outputs, by :func:`key`."""
    out: dict[str, list[dict[str, Any]]] = {}
    for directory in dirs:
        for path in profile_paths(directory):
            for row in read_json(path):
                if "step_seconds" in row.get("on_gpu", {}):
                    row["dir"] = directory.name
                    out.setdefault(key(row["model"], row["settings"]), []).append(row)
    return out


def compare(predictions: list[dict[str, Any]], rows: dict[str, list[dict[str, Any]]]) -> None:
    within = total = 0
    for p in predictions:
        for row in rows.get(key(p["model"], p["settings"]), []):
            m = row["on_gpu"]["step_seconds"]
            err = p["seconds"] / m - 1
            total += 1
            within += abs(err) <= 0.15
            what = ", ".join(f"{k}={v}" for k, v in p["settings"].items() if k != "seq_len")
            busy = row.get("profile", {}).get("busy_seconds")
            gpu = (
                f"  GPU busy {busy * 1e3:7.1f} {p['gpu_busy'] * 1e3:7.1f} ms "
                f"{100 * (p['gpu_busy'] / busy - 1):+5.0f}%"
                if busy
                else ""
            )
            print(
                f"{p['model'][-22:]:22s} {what[:70]:70s} {row['dir'][:10]:10s} "
                f"{m * 1e3:7.1f} {p['seconds'] * 1e3:7.1f} ms {100 * err:+5.0f}%  {p['bound']}"
                + gpu
            )
    print(f"within 15%: {within} of {total}")


def main() -> int:
    from op_profile import configurations

    parser = argparse.ArgumentParser()
    parser.add_argument("--plans", type=Path)
    parser.add_argument("--extra", action="store_true")
    parser.add_argument("--held-out", action="store_true")
    parser.add_argument("--held-out-2", action="store_true")
    parser.add_argument("--compiled-budget", action="store_true")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--against", type=Path, nargs="*")
    parser.add_argument("--predictions", type=Path)
    args = parser.parse_args()
    if args.predictions:
        predictions = json.loads(args.predictions.read_text())["rows"]
    else:
        configs = configurations(
            args.plans, args.extra, args.held_out, args.held_out_2, args.compiled_budget
        )
        predictions = []
        seen: set[str] = set()
        for model, items in configs.items():
            for item in items:
                if key(model, item["settings"]) in seen:  # in both held-out sets
                    continue
                seen.add(key(model, item["settings"]))
                predictions.append(predict(model, item["settings"]))
                p = predictions[-1]
                print(f"{model:26s} {p['seconds'] * 1e3:8.1f} ms  {p['bound']}", flush=True)
    if args.out:
        import torch

        meta = {
            "date": dt.date.today().isoformat(),
            "torch": torch.__version__,
            "command": " ".join(sys.argv),
        }
        args.out.write_text(json.dumps({"meta": meta, "rows": predictions}, indent=1) + "\n")
    if args.against:
        compare(predictions, measured(args.against))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
