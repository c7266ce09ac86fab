"""The table of the planner's proof, from ``plan_proof.py``'s plans and measurements and
``plan_trials.py``'s exhaustive trial (see ``plan_proof.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from results_io import read_json

CONTEXT = 758 * 2**20  # memfit's measured CUDA context of a training process on the H200


def _budget_bytes(text: str) -> int:
    units = {"GiB": 2**30, "MiB": 2**20}
    for unit, scale in units.items():
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * scale)
    raise ValueError(text)


def _trials(directory: Path, model: str) -> list[dict[str, Any]]:
    path = directory / (model.replace(":", "_").replace("/", "_") + ".jsonl")
    return [r for r in map(json.loads, path.open()) if "step_seconds" in r]


def _config(settings: dict[str, Any]) -> str:
    ckpt = {False: "none", True: "full"}.get(settings["activation_checkpointing"], "selective")
    return (
        f"{settings['batch_size']}x{settings['accumulation']} {settings['precision']} "
        f"ckpt {ckpt} {settings['optimizer']}"
    )


def _best(rows: list[dict[str, Any]], budget: int, full_only: bool = False) -> Any:
    fitting = [
        r
        for r in rows
        if r["peak_reserved"] + CONTEXT <= budget
        and (not full_only or r["settings"]["activation_checkpointing"] is True)
    ]
    return min(fitting, key=lambda r: r["step_seconds"]) if fitting else None


def compare(plans: Path, measured: Path, trials: Path, out: Path | None = None) -> None:
    plan_rows = read_json(plans)["rows"]
    got = {(r["model"], r["budget"]): r for r in json.loads(measured.read_text())["rows"]}
    lines = [
        "| workload | budget | plan (planned in) | predicted | measured (loop) | applied | "
        "best by trial | plan / best | full checkpointing | plan / full |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    summary = []
    for row in plan_rows:
        chosen = row["plan"]["chosen"]
        m = got.get((row["model"], row["budget"]), {})
        loop, applied = m.get("loop", {}), m.get("applied", {})
        rows = _trials(trials, row["model"])
        budget = _budget_bytes(row["budget"])
        best, full = _best(rows, budget), _best(rows, budget, full_only=True)
        measured_s = loop.get("step_seconds")
        ratio = best["step_seconds"] / measured_s if best and measured_s else None
        over_full = full["step_seconds"] / measured_s - 1 if full and measured_s else None
        error = chosen["step_seconds"] / measured_s - 1 if measured_s else None
        summary.append(
            {
                "model": row["model"],
                "budget": row["budget"],
                "ratio": ratio,
                "over_full": over_full,
                "error": error,
                "oom": "error" in loop or "error" in applied,
            }
        )
        ckpt = {False: "none", True: "full"}.get(chosen["activation_checkpointing"], "selective")
        alloc = " expandable" if chosen["allocator_config"] else ""
        plan_text = (
            f"{chosen['micro_batch']}x{chosen['accumulation']} {chosen['precision']} ckpt "
            f"{ckpt} {chosen['optimizer']}{alloc} ({row['seconds']:.0f} s)"
        )
        lines.append(
            f"| {row['model']} | {row['budget']} | {plan_text} | "
            f"{chosen['step_seconds'] * 1e3:.0f} ms | {_ms(loop)} | {_ms(applied)} | "
            f"{_config(best['settings']) + ' ' + _ms(best) if best else 'none fits'} | "
            f"{f'{ratio:.0%}' if ratio else '-'} | {_ms(full) if full else 'none fits'} | "
            f"{f'{over_full:+.0%}' if over_full is not None else '-'} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    for s in summary:
        print(s)
    if out:
        out.write_text(text)


def _ms(row: dict[str, Any]) -> str:
    if "error" in row:
        return "OOM" if "out of memory" in row["error"].lower() else "error"
    if "step_seconds" not in row:
        return "-"
    return f"{row['step_seconds'] * 1e3:.0f} ms"
