"""A first step-time model, fitted to the GPU's measured step times: does what a trace counts
(``trace_workload(..., costs=True)``) rank training configurations as the GPU does?

    PYTHONPATH=src python benchmarks/step_time_fit.py MEASURED.json [--out FILE.json]

``MEASURED.json`` is ``step_times.py``'s output. Each configuration that ran is traced on this
CPU with its costs counted; its steady step (step 2) gives tensor-core FLOPs, float32 CUDA-core
FLOPs, bytes read and written, and kernels. The model is additive,

    seconds = tc_flops / R_tc + fp32_flops / R_fp32 + bytes / BW + kernels * launch,

its four rates fitted by non-negative least squares on the relative error (every configuration
weighs the same, fast or slow). Printed: the fitted rates; each configuration's measured and
predicted time, from the fit on all of them and from a fit that left its model out (the honest
number for a model never measured); and, per model, how many pairs of its configurations the
prediction orders as the GPU does.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

FEATURES = ("tensor_core_flops", "fp32_flops", "bytes", "kernels")


def costs_of(row: dict[str, Any]) -> list[float]:
    from memfit._gpus import resolve_gpu
    from memfit.trace import trace_workload
    from memfit.workload import make_workload

    settings = {k: v for k, v in row["settings"].items()}
    workload = make_workload(row["model"], gpu="h200", **settings)
    trace = trace_workload(workload, resolve_gpu("h200"), costs=True)
    assert trace.costs is not None
    step = trace.costs.total("step2.")
    return [float(getattr(step, f)) for f in FEATURES]


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Least squares with the coefficients kept >= 0: a negative one is dropped, then refit."""
    active = list(range(a.shape[1]))
    while True:
        x = np.zeros(a.shape[1])
        x[active] = np.linalg.lstsq(a[:, active], b, rcond=None)[0]
        negative = [i for i in active if x[i] < 0]
        if not negative:
            return x
        active.remove(min(negative, key=lambda i: x[i]))


def fit(x: np.ndarray, t: np.ndarray) -> np.ndarray:
    scale = x.max(axis=0)
    scale[scale == 0] = 1.0
    weighted = (x / scale) / t[:, None]  # relative error: each row divided by its time
    return nnls(weighted, np.ones(len(t))) / scale


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("measured", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    measured = json.loads(args.measured.read_text())
    rows = [r for r in measured["rows"] if "step_seconds" in r]
    for row in rows:
        row["costs"] = costs_of(row)
        print(f"traced {row['model']:28s} {row['variant']}", flush=True)
    x = np.array([r["costs"] for r in rows])
    t = np.array([r["step_seconds"] for r in rows])
    coef = fit(x, t)
    models = sorted({r["model"] for r in rows})
    held_out = np.zeros(len(rows))
    for model in models:
        inside = np.array([r["model"] != model for r in rows])
        held_out[~inside] = x[~inside] @ fit(x[inside], t[inside])
    predicted = x @ coef
    print("\nrates: " + ", ".join(_rate(f, c) for f, c in zip(FEATURES, coef, strict=True)))
    print(f"\n{'model':28s} {'configuration':34s} {'GPU':>8s} {'fit':>8s} {'held out':>9s}")
    for r, p, h in zip(rows, predicted, held_out, strict=True):
        r["predicted_seconds"], r["held_out_seconds"] = float(p), float(h)
        print(
            f"{r['model']:28s} {r['variant']:34s} {r['step_seconds'] * 1e3:6.1f}ms "
            f"{p * 1e3:6.1f}ms {h * 1e3:7.1f}ms ({100 * (h / r['step_seconds'] - 1):+.0f}%)"
        )
    order = _ordering(rows)
    print("\npairs ordered as on the GPU (held-out fit): " + ", ".join(order))
    if args.out:
        meta = {
            "date": dt.date.today().isoformat(),
            "measured": str(args.measured),
            "command": " ".join(sys.argv),
            "rates": dict(zip(FEATURES, map(float, coef), strict=True)),
        }
        for r in rows:
            r["costs"] = dict(zip(FEATURES, r["costs"], strict=True))
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    return 0


def _rate(feature: str, coef: float) -> str:
    if coef == 0:
        return f"{feature}: not used"
    per = 1 / coef
    if feature.endswith("flops"):
        return f"{feature}: {per / 1e12:.0f} TFLOP/s"
    if feature == "bytes":
        return f"bytes: {per / 1e12:.2f} TB/s"
    return f"kernels: {coef * 1e6:.1f} us each"


def _ordering(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for model in sorted({r["model"] for r in rows}):
        mine = [r for r in rows if r["model"] == model]
        pairs = list(itertools.combinations(mine, 2))
        right = sum(
            (a["step_seconds"] < b["step_seconds"])
            == (a["held_out_seconds"] < b["held_out_seconds"])
            for a, b in pairs
        )
        out.append(f"{model} {right}/{len(pairs)}")
    return out


if __name__ == "__main__":
    raise SystemExit(main())
