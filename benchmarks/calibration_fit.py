"""Turn ``calibrate_gpu.py``'s measurements into the calibration memfit ships.

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
``selective``), the median over the tiny models (ResNet-18's rows included, as before the
extra below existed: a base from GPT-2 and BERT alone predicts full-size GPT-2's checkpointed
and selective steps about 10% faster still, ``step_time_check.py``). A convolution call costs
the host more (cuDNN's plan lookup per call, and in a convolutional net the batch norm that follows
it: the trace counts batch norms as ``mem`` ops, so their extra is folded into the
convolution's), fitted in a second step: per phase (``forward``, ``backward``), the median over
the rows that call convolutions (ResNet-18's) of what the phase's base cost leaves of the
measured seconds, divided by its convolution calls, per style: ``forward:conv``,
``backward:conv`` for eager steps, ``forward:conv:selective``... (:func:`fit_host`; on
ResNet-18 a checkpointed or selective step's extra is ten times an eager one's: its wrappers
and dispatch mode per block).
The optimizer's host time is fitted as seconds per op plus seconds per parameter tensor (its
Python loops over the parameters), by least squares over every tiny row. Stepped in backward,
each parameter tensor is a ``step()`` call of its own, and bitsandbytes' 8-bit states loop in
Python: ``optimizer_host.py`` measures the host's time of each apart from the GPU's
(``--optimizer-host FILE``), and :func:`fit_optimizer_host` fits its cost per tensor.

Since 2026-12-03 the host's cost of an op in every phase but the optimizer's comes from real
models (``--host-costs``: ``host_costs.py``'s counted file, six models at a batch of one, where
the GPU waits on the host), pooled (:func:`fit_host`), without fixed parts
(``--no-fixed-parts``: on real models they fitted 5-30 ms a phase and predicted the step times
worse). The tiny workloads' costs per op were 30% above what five held-out real models' phases
took on the same host (GPT-2-medium, RoBERTa, T5-small, ConvNeXt-T, EfficientNet-B0; the refit:
median error 15%, no bias). ``--offload-steps`` fits offload's host cost per copy
(:func:`fit_copy_host`) on offloaded steps measured at full size.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np
from results_io import profile_paths, read_json

STYLES = {
    "fp32": "fp32",
    "bf16-mixed": "eager",
    "bf16-mixed, fused": "eager",
    "bf16-mixed, checkpointing": "checkpointed",
    "bf16-mixed, selective": "selective",
}


@dataclasses.dataclass(frozen=True)
class TinyRow:
    """A measured tiny step and what its trace dispatched: per phase, the ops and the
    convolution calls among them."""

    model: str
    style: str
    seconds: dict[str, float]
    ops: dict[str, int]
    convs: dict[str, int]
    params: int


def is_conv(kind: str) -> bool:
    """A convolution call, forward (``conv:k3:bf16``) or backward (``conv_bwd:k1:fp32``)."""
    return kind.startswith(("conv:", "conv_bwd:"))


@functools.cache
def op_counts(model: str, settings_json: str) -> tuple[dict[str, int], dict[str, int], int]:
    """Per phase of step 2 the ops and the convolution calls, and the parameter tensors."""
    from calibrate_gpu import tiny_workload

    from memfit._gpus import resolve_gpu
    from memfit.trace import trace_workload

    workload = dataclasses.replace(tiny_workload(model, 3), **json.loads(settings_json))
    costs = trace_workload(workload, resolve_gpu("h200"), costs=True).costs
    assert costs is not None
    phases = {n.partition(".")[2]: c for n, c in costs.phases.items() if n.startswith("step2.")}
    ops = {name: len(cost.ops) for name, cost in phases.items()}
    convs = {name: sum(is_conv(kind) for kind, _, _ in cost.ops) for name, cost in phases.items()}
    return ops, convs, costs.parameter_tensors


PER_CONV_STYLES = ("eager", "fp32")
# a phase with fewer convolution calls than this does not fit their extra: ViT-B/16's one (its
# patch embedding) would be charged its whole phase's noise (314 us a call, 2026-12-03)
MIN_CONV_CALLS = 10


def fit_host(
    rows: list[TinyRow], fixed_parts: bool = True, pooled: bool = False
) -> dict[str, float]:
    """The host's seconds per op by ``phase:style`` (eager's under the bare phase), per
    convolution call on top by ``phase:conv:style`` (eager's ``phase:conv``), and the
    optimizer's per op and per parameter tensor. Two steps: the base per op is the median over
    every row of seconds / ops (what it was before the extra existed, so that a model without
    convolutions is predicted as it was); the extra per convolution is the median over the rows
    of the style that call them of (seconds - base x ops) / calls, not below zero. No row with
    convolutions: no ``:conv`` key (the model then charges none). Only eager and fp32 steps get
    an extra of their own (:data:`PER_CONV_STYLES`): what checkpointed ResNet-18 steps leave is
    10-20x eager's per convolution, the cost of checkpointing each block rather than of a cuDNN
    call, fitted on two or three rows, and over-predicted ResNet-50's checkpointed steps by up to
    43%; those styles pay eager's extra per convolution.

    ``pooled`` (real models' rows, ``host_costs.py``): the base per op is the rows'
    seconds over their ops, pooled (a model of many ops, as the language models that planning
    is for, weighs more), over the rows without convolutions; the extra per convolution is fitted
    in every style, on the real convolutional network's own checkpointed steps. A phase with
    fewer than :data:`MIN_CONV_CALLS` convolutions fits no extra. ``fixed_parts``: with rows at
    two depths, a part of each phase whatever its ops (:func:`fit_fixed`)."""
    per: dict[str, list[tuple[float, int]]] = {}
    for row in rows:
        for phase, seconds in row.seconds.items():
            if phase != "optimizer" and row.ops.get(phase):
                if pooled and row.convs.get(phase, 0) >= MIN_CONV_CALLS:
                    continue  # the base from models without convolutions, their extra after
                per.setdefault(f"{phase}:{row.style}", []).append((seconds, row.ops[phase]))
    if pooled:  # the rows' seconds over their ops: a model of many ops weighs more
        host = {k: sum(t for t, _ in v) / sum(n for _, n in v) for k, v in per.items()}
    else:
        host = {k: statistics.median(t / n for t, n in v) for k, v in per.items()}
    fixed = fit_fixed(rows, host) if fixed_parts else {}
    extra: dict[str, list[float]] = {}
    for row in rows:
        for phase, seconds in row.seconds.items():
            calls = row.convs.get(phase, 0)
            styled = pooled or row.style in PER_CONV_STYLES  # real models: every style's own
            if calls >= MIN_CONV_CALLS and phase != "optimizer" and styled:
                key = f"{phase}:{row.style}"
                left = seconds - fixed.get(key, 0.0) - host[key] * row.ops[phase]
                extra.setdefault(f"{phase}:conv:{row.style}", []).append(left / calls)
    host.update({k: max(0.0, statistics.median(v)) for k, v in extra.items()})
    for key, value in fixed.items():  # forward:fixed:checkpointed (forward:fixed for eager)
        phase, _, style = key.partition(":")
        host[f"{phase}:fixed:{style}"] = value
    for key in [k for k in host if k.endswith(":eager")]:
        host[key.removesuffix(":eager")] = host.pop(key)
    optimizer = [r for r in rows if "optimizer" in r.seconds]
    if not optimizer:  # real models' rows (host_costs.py): their optimizer is the GPU's
        host["default"] = host["forward"]
        return host
    a = np.array([[r.params, r.ops["optimizer"]] for r in optimizer], dtype=float)
    t = np.array([r.seconds["optimizer"] for r in optimizer])
    per_param, per_op = np.linalg.lstsq(a, t, rcond=None)[0]
    host["optimizer_param"], host["optimizer"] = float(per_param), float(per_op)
    host["default"] = host["forward"]
    return host


FIXED_PHASES = ("forward", "backward")


def fit_fixed(rows: list[TinyRow], host: dict[str, float]) -> dict[str, float]:
    """Where the rows hold the same tiny models at two depths (``calibrate_gpu.py --only
    tiny-deep``): per ``phase:style`` of :data:`FIXED_PHASES`, what a phase costs the host
    whatever its ops and the cost per op, by least squares of seconds on ops over the models
    without convolutions (a convolution's extra is fitted after, on top); ``host`` takes the
    new cost per op, and the fixed part is returned. A fixed part under a microsecond (none seen)
    keeps the median per op, with none."""
    fixed: dict[str, float] = {}
    for key in list(host):
        phase, _, style = key.partition(":")
        if phase not in FIXED_PHASES:
            continue
        points = [
            (row.ops[phase], row.seconds[phase])
            for row in rows
            if row.style == style and row.ops.get(phase) and not row.convs.get(phase)
        ]
        if len({ops for ops, _ in points}) < 2:
            continue
        a = np.array([[1.0, ops] for ops, _ in points])
        t = np.array([seconds for _, seconds in points])
        base, per_op = np.linalg.lstsq(a, t, rcond=None)[0]
        if base > 1e-6 and per_op > 0:  # a microsecond or more: not rounding
            fixed[key], host[key] = float(base), float(per_op)
    return fixed


def real_rows(path: Path) -> list[TinyRow]:
    """``host_costs.py``'s rows of the models it fits on (``host_costs.FITTED``), counted
    (``host_costs.py count``): per phase the host's own seconds (``issue_seconds``: at a batch
    of one the GPU waits on the host), the optimizer's left out (a 1.1B-parameter model's update
    is the GPU's even then)."""
    from host_costs import FITTED

    rows = []
    for row in json.loads(path.read_text())["rows"]:
        if row["model"] not in FITTED or "counts" not in row or "error" in row["counts"]:
            continue
        counts = row["counts"]
        seconds = {k: v for k, v in row["issue_seconds"].items() if k != "optimizer"}
        ops = {k: v["ops"] for k, v in counts.items() if k in seconds}
        convs = {k: v["convs"] for k, v in counts.items() if k in seconds}
        params = counts["_"]["parameter_tensors"]
        rows.append(TinyRow(row["model"], STYLES[row["variant"]], seconds, ops, convs, params))
    return rows


MIN_COPIES = 100  # offloaded steps with fewer copies than this do not fit their host cost


def fit_copy_host(path: Path, calibration: dict[str, Any]) -> float:
    """The host's seconds on top of an op's for each of activation offload's copies
    (``host["copy"]``), from ``host_costs.py validate``'s offloaded rows: per row with at
    least :data:`MIN_COPIES` copies in a step, the cost that makes the predicted step the
    measured one (the model is linear in it while the step waits on the host), the median."""
    from memfit._gpus import resolve_gpu
    from memfit.planner import Calibration, candidate_costs
    from memfit.planner._search import _predict
    from memfit.trace import is_copy
    from memfit.workload import make_workload

    gpu = resolve_gpu("h200")
    at = {
        x: Calibration.from_dict({**calibration, "host": {**calibration["host"], "copy": x}})
        for x in (0.0, 1e-4)
    }
    fitted = []
    for line in path.open():
        row = json.loads(line)
        settings = row["settings"]
        if not row.get("step_seconds") or not settings.get("offload"):
            continue
        workload = make_workload(row["model"], gpu="h200", **settings)
        costs, traced = candidate_costs(workload, gpu)
        step = [c for n, c in costs.phases.items() if n.startswith("step2.")]
        copies = sum(is_copy(k) and k in ("d2h", "h2d") for c in step for k, _, _ in c.ops)
        if copies < MIN_COPIES:
            continue
        t0, t1 = (_predict(workload, costs, traced, cal).seconds for cal in at.values())
        x = (row["step_seconds"] - t0) / (t1 - t0) * 1e-4
        print(f"copy: {row['model']} {settings} {copies} copies: {x * 1e6:.1f} us", flush=True)
        fitted.append(x)
    if not fitted:
        raise SystemExit(f"{path}: no offloaded row with {MIN_COPIES} copies or more")
    return max(0.0, statistics.median(fitted))


def fit_optimizer_host(rows: list[dict[str, Any]], host: dict[str, float]) -> dict[str, float]:
    """The host's seconds per parameter tensor of each optimizer variant
    (``optimizer_param:in-backward``, ``optimizer_param:8bit``), from ``optimizer_host.py``'s
    rows: per model, the host's seconds of backward and step with the variant less with the
    fused AdamW, less the ops the variant adds at the optimizer's cost per op, over the tensors,
    plus the fused loop's own cost per tensor (which the fused step also paid). The median over
    the models."""
    per: dict[str, list[float]] = {}
    for row in rows:
        runs = row["runs"]
        fused = runs["adamw-fused"]
        for name, got in runs.items():
            if name == "adamw-fused":
                continue
            added = optimizer_ops(row["model"], name) - optimizer_ops(row["model"], "adamw-fused")
            spent = got["host_seconds"] - fused["host_seconds"]
            value = (spent - added * host["optimizer"]) / row["tensors"] + host["optimizer_param"]
            per.setdefault(name.partition("-")[2], []).append(value)
    return {f"optimizer_param:{k}": statistics.median(v) for k, v in per.items()}


@functools.cache
def optimizer_ops(model: str, optimizer: str) -> int:
    """The optimizer ops of step 2 of ``optimizer_host.py``'s workload, as traced."""
    from optimizer_host import MODELS, workload

    from memfit._gpus import resolve_gpu
    from memfit.trace import trace_workload

    settings = dict(MODELS)[model]
    w = dataclasses.replace(workload(model, settings, optimizer), steps=3)
    costs = trace_workload(w, resolve_gpu("h200"), costs=True).costs
    assert costs is not None
    return len(costs.phases["step2.optimizer"].ops)


def fit_mem_factors(profiles: Path, calibration: dict[str, Any]) -> dict[str, float]:
    """Per family of memory-bound op, the median over profiled configurations (``op_profile.py``'s
    output) of its measured GPU seconds over what the bandwidth alone predicts for its traced
    bytes (families under 0.2 ms in a configuration are not counted there); per family and
    dtype (``bn:bf16``) from the configurations whose trace ran the family in that dtype alone
    (the profile does not say the dtype) and that measured 0.2 ms of it (a few tiny kernels are
    their launches, not their bytes). Elementwise kernels are the ``elementwise`` family. A
    family's forward and backward ops (``norm``, ``norm_bwd``) are fitted apart; either half
    that no configuration ran 0.2 ms of takes the two halves' fit together (ResNet's pooling)."""
    from op_compare import family_seconds

    from memfit.planner import Calibration
    from memfit.trace import MEM_FAMILIES, mem_family

    base = Calibration.from_dict({**calibration, "mem_factors": {}})
    ratios: dict[str, list[float]] = {}
    whole: dict[str, list[float]] = {}  # forward and backward together
    for path in profile_paths(profiles):
        for row in read_json(path):
            if "ops" in row.get("profile", {}):
                measured, predicted, dtypes = family_seconds(row, base)
                _add_ratios(ratios, measured, predicted, dtypes)
                _add_ratios(whole, *(_halves_together(d) for d in (measured, predicted, dtypes)))
    split = {mem_family(n) for names in MEM_FAMILIES.values() for n in names} - set(MEM_FAMILIES)
    missing = [
        half
        for bwd in split
        for half in (bwd.removesuffix("_bwd"), bwd)
        if not any(k.partition(":")[0] == half for k in ratios)
    ]
    for half in missing:  # the halves' fit together, and its dtypes'
        family = half.removesuffix("_bwd")
        for key, values in whole.items():
            if key.partition(":")[0] == family:
                ratios[key.replace(family, half, 1)] = values
    for family, values in sorted(ratios.items()):
        print(
            f"mem {family:12s} x{statistics.median(values):5.2f} over {len(values)} steps",
            flush=True,
        )
    return {f: round(statistics.median(v), 3) for f, v in sorted(ratios.items())}


def _add_ratios(
    ratios: dict[str, list[float]],
    measured: dict[str, float],
    predicted: dict[str, float],
    dtypes: dict[str, set[str]],
) -> None:
    for kind, seconds in predicted.items():
        if kind.startswith("mem:") and seconds >= 2e-4 and measured.get(kind):
            family = kind.partition(":")[2] or "elementwise"
            ratio = measured[kind] / seconds
            ratios.setdefault(family, []).append(ratio)
            # the family ran in one dtype: its own factor, where it ran long enough to be its
            # bytes rather than its launches
            ran_in = dtypes.get(kind, set())
            if len(ran_in) == 1 and measured[kind] >= 2e-4:
                ratios.setdefault(f"{family}:{min(ran_in)}", []).append(ratio)


def _halves_together(by_kind: dict[str, Any]) -> dict[str, Any]:
    """``by_kind`` with each ``mem:<family>_bwd`` added into ``mem:<family>``."""
    out: dict[str, Any] = {}
    for kind, value in by_kind.items():
        key = kind.removesuffix("_bwd") if kind.startswith("mem:") else kind
        if key not in out:
            out[key] = set(value) if isinstance(value, set) else value
        elif isinstance(value, set):
            out[key] |= value
        else:
            out[key] += value
    return out


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
        k: v
        for k, v in complete[-1]["curves"].items()
        if k != "mem" and not is_class_curve(k) and not k.startswith("mm_a")
    }
    out: dict[str, Any] = {"curves": curves}
    unaligned = [run for run in runs if any(k.startswith("mm_a") for k in run["curves"])]
    if unaligned:
        curves.update({k: v for k, v in unaligned[-1]["curves"].items() if k.startswith("mm_a")})
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
    parser.add_argument(
        "--optimizer-host",
        type=Path,
        help="optimizer_host.py's file: the host's cost per tensor of each optimizer variant",
    )
    parser.add_argument(
        "--host-calibration",
        type=Path,
        help="take the tiny workloads (both depths) from this file alone: one call to the GPU "
        "host, whose CPU's speed the fit then rests on",
    )
    parser.add_argument(
        "--host-costs",
        type=Path,
        help="host_costs.py's counted file: the host's cost of an op in each phase but the "
        "optimizer's fitted on real models at a batch of one in place of the "
        "tiny workloads, which keep the optimizer's",
    )
    parser.add_argument(
        "--offload-steps",
        type=Path,
        help="host_costs.py validate's rows: offload's host cost per copy from the offloaded "
        "steps among them",
    )
    parser.add_argument(
        "--no-fixed-parts",
        dest="fixed_parts",
        action="store_false",
        help="with --host-costs: a cost per op alone, no part of a phase whatever its ops",
    )
    parser.add_argument(
        "--op-profile",
        type=Path,
        help="op_profile.py's directory: each memory-bound family's share of the bandwidth",
    )
    args = parser.parse_args()
    runs = [json.loads(path.read_text()) for path in args.calibration]
    shipped = shipped_curves(runs)
    measured = [run for run in runs if "kernel_floor_seconds" in run][-1]
    rows = []
    tiny_runs = [json.loads(args.host_calibration.read_text())] if args.host_calibration else runs
    for row in [r for run in tiny_runs for r in (*run.get("tiny", ()), *run.get("tiny_deep", ()))]:
        if "phase_seconds" not in row:
            continue
        settings = json.dumps(row["settings"], sort_keys=True)
        ops, convs, params = op_counts(row["model"], settings)
        style = STYLES[row["variant"]]
        rows.append(TinyRow(row["model"], style, row["phase_seconds"], ops, convs, params))
        print(f"{row['model']:14s} {row['variant']:26s} ops {ops} convolutions {convs}", flush=True)
    host = fit_host(rows)
    host_date = None
    if args.host_costs is not None:  # forward, backward, input, zero_grad from real models
        host_date = json.loads(args.host_costs.read_text())["meta"]["date"]
        real = fit_host(real_rows(args.host_costs), fixed_parts=args.fixed_parts, pooled=True)
        kept = {k: v for k, v in host.items() if k.startswith("optimizer")}
        host = {**real, **kept}
    if args.optimizer_host is not None:
        rows = json.loads(args.optimizer_host.read_text())["rows"]
        host.update(fit_optimizer_host(rows, host))
    mem = measured["curves"]["mem"]
    floor = args.kernel_floor or measured.get("kernel_floor_seconds")
    bandwidth = mem[-1][0] / (mem[-1][1] - floor)
    meta = measured["meta"]
    out = {
        "key": args.key,
        "gpu": meta["gpu"],
        "source": f"measured {meta['date']}, torch {meta['torch']}, CUDA {meta['cuda']}"
        + (f"; host costs {host_date}" if host_date else ""),
        "command": " ".join(sys.argv),
        "curves": shipped["curves"],
        **{k: v for k, v in shipped.items() if k != "curves"},
        "kernel_floor": floor,
        "bandwidth": bandwidth,
        "h2d_seconds_per_byte": measured["input_seconds_per_byte"]["h2d"],
        "host": {k: round(v, 9) for k, v in sorted(host.items())},
    }
    pinned = [run["pinned"] for run in runs if "pinned" in run]
    if pinned:  # activation offload's copies, the last measured
        out["pinned_seconds_per_byte"] = {k: pinned[-1][k] for k in ("d2h", "h2d")}
    if args.op_profile is not None:
        out["mem_factors"] = fit_mem_factors(args.op_profile, out)
    if args.offload_steps is not None:
        out["host"]["copy"] = round(fit_copy_host(args.offload_steps, out), 9)
        print(f"host copy {out['host']['copy'] * 1e6:7.2f} us")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    for k, v in sorted(host.items()):
        print(f"host {k:24s} {v * 1e6:7.2f} us")
    print(f"bandwidth {bandwidth / 1e12:.2f} TB/s, kernel floor {floor * 1e6:.2f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
