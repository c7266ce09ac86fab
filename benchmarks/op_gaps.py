"""Every profiled op against the step-time model, by op name: where the model's
GPU time and the profiler's differ, and by how much.

    PYTHONPATH=src python benchmarks/op_gaps.py PROFILE.json [...] --out GAPS.jsonl
    python benchmarks/op_gaps.py --table GAPS.jsonl [--only MODEL ...]

The first form traces each configuration ``op_profile.py`` profiled, as the planner traces it
(``candidate_costs``), and keeps, per (phase, op name), the GPU milliseconds measured and
predicted with the shipped calibration (one line of JSON per configuration). The second sums
them over configurations, with op names grouped where the profiler and the trace name the
same kernels differently (``_to_copy`` runs as ``copy_``, SDPA as its backend's op, a
convolution as ``cudnn_convolution``), largest gaps first. It found
(results/2026-12-03-cpu-step-time-kernels/) that
``_unsafe_view`` was timed at its bytes though it runs no kernel.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from results_io import is_profile_meta, read_json

_GROUPS = {
    "copy": ("copy_", "_to_copy", "clone"),
    "cat": ("cat", "stack"),
    "fill": ("fill_", "zero_", "zeros", "zeros_like", "full", "ones", "ones_like", "new_zeros"),
    "relu": ("relu_", "relu", "clamp_min_", "clamp_min", "threshold_backward"),
    "mm": ("mm", "addmm", "bmm", "baddbmm"),
}


def group(phase: str, name: str) -> str:
    """The name both sides agree on for an op's kernels."""
    if phase == "optimizer":
        return "optimizer"
    if "attention" in name or "convolution" in name:
        kind = "attn" if "attention" in name else "conv"
        return f"{kind}_bwd" if "backward" in name else kind
    if "softmax" in name or "norm" in name:
        return name.removeprefix("_").replace("native_", "")
    return next((g for g, names in _GROUPS.items() if name in names), name)


def measure(paths: list[Path], out: Path) -> None:
    from memfit._gpus import resolve_gpu
    from memfit.planner import calibration_for, candidate_costs
    from memfit.trace import _costs
    from memfit.workload import make_workload

    gpu = resolve_gpu("h200")
    calibration = calibration_for(gpu)[0]
    names: dict[tuple[str, int], str] = {}
    record = _costs.StepCosts.record

    def named(self: Any, func: Any, args: Any, kwargs: Any, result: Any, phase: str) -> None:
        before = len(self.phases[phase].ops) if phase in self.phases else 0
        record(self, func, args, kwargs, result, phase)
        if len(self.phases[phase].ops) > before:
            names[(phase, before)] = func.overloadpacket.__name__

    _costs.StepCosts.record = named  # type: ignore[method-assign]
    with out.open("w") as fh:
        for path in (p for p in paths if not is_profile_meta(p)):
            for row in read_json(path):
                if "ops" not in row.get("profile", {}):
                    continue
                names.clear()
                workload = make_workload(row["model"], gpu="h200", **row["settings"])
                costs, traced = candidate_costs(workload, gpu)
                pred: dict[tuple[str, str], float] = defaultdict(float)
                for phase_name, cost in costs.phases.items():
                    phase = phase_name.partition(".")[2]
                    if not phase_name.startswith("step2.") or phase == "input":
                        continue
                    scale = (
                        workload.accumulation / traced if phase in ("forward", "backward") else 1
                    )
                    for i, (kind, flops, nbytes) in enumerate(cost.ops):
                        # step 2's passes are step 1's, copied: their names are step 1's
                        name = names.get((phase_name, i)) or names.get((f"step1.{phase}", i), kind)
                        pred[(phase, name)] += calibration.gpu_seconds(kind, flops, nbytes) * scale
                meas: dict[tuple[str, str], float] = defaultdict(float)
                for op in row["profile"]["ops"]:
                    phase = op["phase"].partition(".")[2]
                    if phase != "input":
                        meas[(phase, op["name"].removeprefix("aten::"))] += op["gpu_seconds"]
                ops = {
                    f"{p}|{n}": [round(meas[(p, n)] * 1e3, 3), round(pred[(p, n)] * 1e3, 3)]
                    for p, n in set(meas) | set(pred)
                }
                line = {"file": str(path), "model": row["model"], "settings": row["settings"]}
                fh.write(json.dumps({**line, "ops": ops}) + "\n")
                print(f"{row['model']}: {len(ops)} op names", flush=True)


def table(path: Path, only: list[str]) -> None:
    total: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    rows = [json.loads(line) for line in path.open()]
    rows = [r for r in rows if not only or any(o in r["model"] for o in only)]
    for row in rows:
        for key, (m, p) in row["ops"].items():
            phase, name = key.split("|")
            cell = total[(phase, group(phase, name))]
            cell[0] += m
            cell[1] += p
    print(f"{len(rows)} configurations; ms summed over them")
    ranked = sorted(total.items(), key=lambda kv: -abs(kv[1][0] - kv[1][1]))
    for (phase, name), (m, p) in ranked[:30]:
        ratio = f"{m / p:5.2f}" if p else "    -"
        print(
            f"{phase:9s} {name:34s} measured {m:8.2f} predicted {p:8.2f} gap {m - p:+8.2f} {ratio}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n\n")[0])
    parser.add_argument("profiles", nargs="*", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--table", type=Path)
    parser.add_argument("--only", nargs="*", default=[])
    args = parser.parse_args()
    if args.table:
        table(args.table, args.only)
    elif args.out and args.profiles:
        measure(args.profiles, args.out)
    else:
        parser.error("give PROFILE.json ... --out GAPS.jsonl, or --table GAPS.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
