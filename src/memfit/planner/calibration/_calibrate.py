"""Measure this machine's step-time calibration (``memfit calibrate``)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import platform
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch

from memfit._errors import InvalidInputError, NoGPUError
from memfit.planner.calibration._store import device_key, shipped

__all__ = ["DEFAULT_PARTS", "PARTS", "calibrate"]

# what can be measured, in the order measured: matrix products, those of unaligned rows,
# attention, elementwise traffic (with the smallest kernel and the input's copy),
# convolutions, pinned copies (activation offload), the host's cost of an op
PARTS = ("mm", "mm_align", "attn", "mem", "conv", "pinned", "host")
# measured unless asked otherwise: the GPU's. The host's factors are asked for by name: on an
# H200 host, scaling memfit's host costs by them predicted 43 full-size steps no better
# (median error 9.3% against 5.3%, 33 of 43 within 15% against 32;
# benchmarks/results/2026-12-03-h200-calibrate-attention-tiles)
DEFAULT_PARTS = PARTS[:-1]
_ROOM = 0.4  # the share of the GPU's free memory a measurement's tensors may take
_QUICK_CONV = (1e8, 1e10)  # forward FLOPs of each convolution class with quick=True


def calibrate(
    parts: Iterable[str] = DEFAULT_PARTS,
    *,
    quick: bool = False,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """This machine's calibration, as the data of a calibration file (``save_calibration``
    writes it where the planner looks). ``parts`` picks what is measured (:data:`PARTS`;
    default :data:`DEFAULT_PARTS`, the GPU's); the rest is kept from memfit's calibration of
    this GPU type, or the H200's, and the file names what was kept. ``quick``: two sizes of
    each convolution class and one reference model for the host (about half the time).
    ``progress`` is told each part as it is done."""
    chosen = _check_parts(parts)
    if not torch.cuda.is_available():
        raise NoGPUError(
            "memfit calibrate measures this machine's GPU, and no CUDA GPU is available here: "
            "run it on the machine you will train on (the plan's step times then come from "
            "its rates), or plan without it (memfit's H200 rates stand in, with a note)."
        )
    started = time.perf_counter()
    name = torch.cuda.get_device_name()
    key = device_key(name)
    ours = shipped()
    base = ours.get(key, ours["h200"])
    data: dict[str, Any] = {
        **{k: v for k, v in base.items() if k not in ("command", "measured")},
        "key": key,
        "gpu": name,
        "curves": dict(base["curves"]),
        "graph_timed": sorted(base.get("graph_timed", ())),
    }
    report = progress or (lambda _: None)
    measured = _measure_gpu(data, chosen, quick, report)
    if "host" in chosen:
        measured["host"] = _measure_host(data, quick, report)
    kept = [p for p in PARTS if p not in chosen]
    data["source"] = (
        f"measured {dt.date.today().isoformat()} on this machine by memfit calibrate, torch "
        f"{torch.__version__}, CUDA {torch.version.cuda}"
        + (f"; kept from memfit's ({base['source']}): {', '.join(kept)}" if kept else "")
        + "; the memory-bound families' factors are memfit's"
    )
    data["measured"] = {
        "parts": list(chosen),
        "kept": kept,
        "base": base["source"],
        "quick": quick,
        "host_cpu": platform.processor() or platform.machine(),
        "seconds": round(time.perf_counter() - started, 1),
        **measured,
    }
    return data


def _check_parts(parts: Iterable[str]) -> tuple[str, ...]:
    if isinstance(parts, str):
        parts = [p.strip() for p in parts.split(",") if p.strip()]
    chosen = tuple(dict.fromkeys(parts))
    unknown = [p for p in chosen if p not in PARTS]
    if unknown or not chosen:
        raise InvalidInputError(
            f"calibrate parts {', '.join(map(repr, unknown)) or 'none'}: give some of "
            f"{', '.join(PARTS)} (default: all but host)."
        )
    return tuple(p for p in PARTS if p in chosen)


def _measure_gpu(
    data: dict[str, Any], chosen: tuple[str, ...], quick: bool, report: Callable[[str], None]
) -> dict[str, Any]:
    """The GPU's curves and rates of ``chosen`` into ``data``; what to record of them."""
    from memfit.planner.calibration import _gpu_rates as rates
    from memfit.planner.calibration._conv_rates import CONV_FLOPS, conv_curves

    free, _ = torch.cuda.mem_get_info()
    room = int(free * _ROOM)
    curves, out = data["curves"], dict[str, Any]()
    measure = {
        "mm": rates.matmul_curves,
        "mm_align": rates.unaligned_matmul_curves,
        "attn": rates.attention_curves,
    }
    for part in [p for p in chosen if p in measure]:
        curves.update(measure[part](room))
        report(part)
    if "mem" in chosen:
        data["kernel_floor"] = floor = rates.kernel_floor()
        curves["mem"] = mem = rates.memory_curve(room)
        data["bandwidth"] = mem[-1][0] / max(mem[-1][1] - floor, 1e-9)
        data["h2d_seconds_per_byte"] = rates.input_rates()["h2d"]
        report("mem")
    if "conv" in chosen:
        conv, rows = conv_curves(room, _QUICK_CONV if quick else CONV_FLOPS)
        curves.update(conv)
        data["graph_timed"] = sorted({*data["graph_timed"], *conv})
        out["conv_failed"] = [r for r in rows if "error" in r]
        report("conv")
    if "pinned" in chosen:
        data["pinned_seconds_per_byte"] = rates.pinned_rates(room)
        report("pinned")
    torch.cuda.empty_cache()
    return out


def _measure_host(data: dict[str, Any], quick: bool, report: Callable[[str], None]) -> Any:
    """Scale ``data``'s host costs by this machine's factors; the factors and their rows."""
    from memfit.estimator import local_gpu
    from memfit.planner._step_time import Calibration
    from memfit.planner.calibration._host_scale import (
        REFERENCE,
        host_factors,
        measure_rows,
        scaled_host,
    )

    models = list(REFERENCE)[:1] if quick else list(REFERENCE)
    rows = measure_rows(local_gpu(), Calibration.from_dict(data), models, report)
    if not rows:
        raise InvalidInputError(
            "memfit calibrate ran none of its reference steps on this GPU (each is named "
            "above with its error), so the host's cost of an op cannot be measured: calibrate "
            "the GPU's parts alone (leave host out of --parts)."
        )
    factors = host_factors(rows)
    data["host"] = scaled_host(data["host"], factors)
    report("host")
    return {"factors": factors, "rows": [dataclasses.asdict(r) for r in rows]}
