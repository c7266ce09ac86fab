"""The step-time model's GPU seconds against the profiler's, by phase and kind of op.

    PYTHONPATH=src python benchmarks/op_compare.py PROFILE_DIR [--only MODEL ...] [--json F]

``PROFILE_DIR`` is ``op_profile.py``'s output. Each profiled configuration is traced here as
the planner traces it (costs counted, the op names kept beside them), and its GPU seconds are
predicted op by op with the shipped calibration. Printed per configuration and phase: the
GPU seconds measured and predicted for matrix products (``mm``), convolutions, attention and
every other kernel (``mem``), and the kernels counted. The micro-batch phases of a step that
accumulates are scaled from the traced micro-batches, as the planner scales them.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from results_io import profile_paths, read_json

KINDS = ("mm", "conv", "attn", "mem")


def measured_kind(name: str) -> str:
    """A profiled op's kind: ``mm``, ``conv``, ``attn``, or ``mem:<family>`` (``mem:`` for an
    elementwise kernel) by the trace's families (the profile does not say the dtype)."""
    from memfit.trace import mem_family

    bare = name.removeprefix("aten::")
    if bare in ("mm", "addmm", "bmm", "baddbmm", "addbmm", "_scaled_mm", "addmv", "mv"):
        return "mm"
    if "convolution" in bare:
        return "conv"
    if "attention" in bare:
        return "attn"
    return f"mem:{mem_family(bare) or ''}"


def measured_parts(op: dict[str, Any]) -> list[tuple[str, float]]:
    """A profiled op's GPU seconds by kind (:func:`measured_kind`); a concatenation's split by
    the kernels it ran (their own seconds where the profile kept them, else in proportion to
    their calls): CUDA's strided kernel
    (``CatArrayBatchedCopy``) is ``mem:cat_strided``, copies input by input ``mem:copy``; an
    elementwise op's unrolled kernel ``mem:ew_unrolled``, its general one ``mem:ew_strided``,
    as the trace's ``_kernel_choice`` names them."""
    kind = measured_kind(op["name"])
    if kind not in ("mem:cat", "mem:") or not op.get("kernels"):
        return [(kind, op["gpu_seconds"])]
    calls = sum(op["kernels"].values())
    timed = op.get("kernel_seconds")  # profiles from 2026-12-03 on; before, by calls
    out: dict[str, float] = defaultdict(float)
    for kernel, n in op["kernels"].items():
        seconds = timed[kernel] if timed else op["gpu_seconds"] * n / calls
        out[_kernel_kind(kind, kernel)] += seconds
    return list(out.items())


def _kernel_kind(kind: str, kernel: str) -> str:
    """A concatenation's or elementwise op's kernel as the trace's ``_kernel_choice`` names it."""
    if kind == "mem:cat":
        if "CatArrayBatchedCopy<" in kernel:
            return "mem:cat_strided"
        return "mem:cat" if "CatArrayBatchedCopy" in kernel else "mem:copy"
    if "vectorized_elementwise_kernel" in kernel:
        return "mem:"
    if "unrolled_elementwise_kernel" in kernel:
        return "mem:ew_unrolled"
    return "mem:ew_strided" if "elementwise_kernel" in kernel else "mem:"


def predicted_kind(kind: str) -> str:
    """A traced op's kind as :func:`measured_kind` names it."""
    family = kind.partition(":")[0].removesuffix("_bwd").replace("_dropout", "")
    if family.startswith("mm"):
        return "mm"
    if family in ("conv", "attn"):
        return family
    return f"mem:{kind.partition(':')[2].partition(':')[0]}"  # mem:<family>, mem: elementwise


def family_seconds(
    row: dict[str, Any], calibration: Any
) -> tuple[dict[str, float], dict[str, float], dict[str, set[str]]]:
    """A profiled configuration's GPU seconds by kind (:func:`measured_kind`), measured and
    predicted with ``calibration``, over the phases of the model and the optimizer (the input's
    copy left out), and the dtypes each memory-bound family ran in by the trace."""
    meas: dict[str, float] = defaultdict(float)
    for op in row["profile"].get("ops", []):
        if not op["phase"].endswith(".input"):
            for kind, seconds in measured_parts(op):
                meas[kind] += seconds
    pred: dict[str, float] = defaultdict(float)
    dtypes: dict[str, set[str]] = defaultdict(set)
    for phase, ops in _traced(row).items():
        if phase != "input":
            for kind, flops, nbytes, scale in ops:
                pred[predicted_kind(kind)] += calibration.gpu_seconds(kind, flops, nbytes) * scale
                if kind.count(":") == 2 and kind.startswith("mem:"):
                    dtypes[predicted_kind(kind)].add(kind.rpartition(":")[2])
    return meas, pred, dtypes


def _traced(row: dict[str, Any]) -> dict[str, list[tuple[str, int, int, float]]]:
    """The traced step's ops by phase, each with its scale (micro-batch phases scaled from the
    traced micro-batches to the configuration's)."""
    from memfit._gpus import resolve_gpu
    from memfit.planner import candidate_costs
    from memfit.workload import make_workload

    workload = make_workload(row["model"], gpu="h200", **row["settings"])
    costs, traced = candidate_costs(workload, resolve_gpu("h200"))
    out: dict[str, list[tuple[str, int, int, float]]] = {}
    for name, cost in costs.phases.items():
        if name.startswith("step2."):
            phase = name.partition(".")[2]
            micro = phase in ("input", "forward", "backward")
            scale = workload.accumulation / traced if micro else 1.0
            out[phase] = [(k, f, b, scale) for k, f, b in cost.ops]
    return out


def measured(row: dict[str, Any]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for op in row["profile"].get("ops", []):
        phase = op["phase"].partition(".")[2]
        out[phase][measured_kind(op["name"]).partition(":")[0]] += op["gpu_seconds"]
        out[phase]["kernels"] += op["calls"] * sum(op["kernels"].values()) / max(op["calls"], 1)
    return out


def predicted(row: dict[str, Any]) -> dict[str, dict[str, float]]:
    from memfit._gpus import resolve_gpu
    from memfit.planner import calibration_for

    calibration = calibration_for(resolve_gpu("h200"))[0]
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for phase, ops in _traced(row).items():
        for kind, flops, nbytes, scale in ops:
            seconds = calibration.gpu_seconds(kind, flops, nbytes)
            if seconds:
                out[phase][predicted_kind(kind).partition(":")[0]] += seconds * scale
                out[phase]["kernels"] += scale
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("profiles", type=Path)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = []
    for path in profile_paths(args.profiles):
        for row in read_json(path):
            if (args.only and row["model"] not in args.only) or "ops" not in row["profile"]:
                continue
            meas, pred = measured(row), predicted(row)
            what = ", ".join(f"{k}={v}" for k, v in row["settings"].items() if k != "seq_len")
            print(f"\n{row['model']} ({row['source']}): {what}")
            print(
                f"  on_gpu {row['on_gpu']['step_seconds'] * 1e3:.1f} ms, "
                f"busy {row['profile']['busy_seconds'] * 1e3:.1f} ms"
            )
            for phase in ("input", "forward", "backward", "optimizer", "zero_grad"):
                m, p = meas.get(phase, {}), pred.get(phase, {})
                cells = "  ".join(
                    f"{k} {m.get(k, 0) * 1e3:6.2f}/{p.get(k, 0) * 1e3:6.2f}" for k in KINDS
                )
                print(
                    f"  {phase:9s} {cells}  kernels {m.get('kernels', 0):5.0f}/"
                    f"{p.get('kernels', 0):5.0f}"
                )
            results.append({**row, "measured": meas, "predicted": pred, "profile": None})
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
