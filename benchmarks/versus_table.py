"""The table of ``plan_versus.py``'s results: per plan, its measured step beside the fastest
configuration that ran under the same cap and the fastest full checkpointing that ran.

    python benchmarks/versus_table.py VERSUS.json ... [--plans PLANS.json] [--out FILE.md]

Throughput is samples per second at the same global batch, so the plan's share of the best is
best step time / plan's step time. "Faster than full" is only shown where full checkpointing is
not the plan itself. With ``--plans`` (the plans file ``plan_versus.py`` ran), a second table
sets every configuration that ran beside its predicted step time, where the planner predicted
it (a contender the planner did not trace has none).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from results_io import read_json


def describe(s: dict[str, Any]) -> str:
    ckpt = s["activation_checkpointing"]
    words = (
        {False: "none", True: "full"}.get(ckpt, "selective")
        if not isinstance(ckpt, float)
        else f"{ckpt:.0%}"
    )
    return (
        f"{s['batch_size']} x {s['accumulation']}, {s['precision']}, ckpt {words}, {s['optimizer']}"
    )


def row(entry: dict[str, Any]) -> dict[str, Any]:
    runs = entry["runs"]
    plan = next(r for r in runs if r["is_plan"])
    ran = [r for r in runs if r["step_seconds"]]
    best = min(ran, key=lambda r: r["step_seconds"])
    full = [
        r for r in ran if r["settings"]["activation_checkpointing"] is True and not r["is_plan"]
    ]
    best_full = min(full, key=lambda r: r["step_seconds"]) if full else None
    plan_is_full = plan["settings"]["activation_checkpointing"] is True
    out = {
        "model": entry["model"],
        "budget": entry["budget"],
        "plan": describe(plan["settings"]),
        "plan_ms": plan["step_seconds"] * 1e3 if plan["step_seconds"] else None,
        "best": describe(best["settings"]),
        "best_ms": best["step_seconds"] * 1e3,
        "share_of_best": best["step_seconds"] / plan["step_seconds"]
        if plan["step_seconds"]
        else 0.0,
        "oom": sum(1 for r in runs if not r["step_seconds"]),
        "ran": len(ran),
        "full_ms": best_full["step_seconds"] * 1e3 if best_full else None,
        "over_full": (best_full["step_seconds"] / plan["step_seconds"] - 1)
        if best_full and plan["step_seconds"] and not plan_is_full
        else None,
    }
    return out


def _same(settings: dict[str, Any], candidate: dict[str, Any]) -> bool:
    a, b = settings["activation_checkpointing"], candidate["activation_checkpointing"]
    ckpt = abs(a - b) < 0.01 if isinstance(a, float) and isinstance(b, float) else a == b
    return (
        ckpt
        and settings["batch_size"] == candidate["micro_batch"]
        and settings["accumulation"] == candidate["accumulation"]
        and settings["precision"] == candidate["precision"]
        and settings["optimizer"] == candidate["optimizer"]
        and not candidate.get("offload")
        and not candidate.get("offload_checkpoints")
    )


def predicted_lines(entries: list[dict[str, Any]], plans: Path) -> list[str]:
    """Every configuration that ran, its measured and predicted step time."""
    chosen = {(r["model"], r["budget"]): r["plan"] for r in read_json(plans)["rows"]}
    lines = [
        "| workload | budget | configuration | plan | measured ms | predicted ms | error | bound |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    errors = []
    for entry in entries:
        plan = chosen[(entry["model"], entry["budget"])]
        for run in entry["runs"]:
            if not run["step_seconds"]:
                continue
            found = [c for c in plan["candidates"] if _same(run["settings"], c)]
            measured = run["step_seconds"] * 1e3
            if not found:
                lines.append(
                    f"| {entry['model']} | {entry['budget']} | {describe(run['settings'])} | "
                    f"{'yes' if run['is_plan'] else ''} | {measured:.1f} | - | - | - |"
                )
                continue
            best = min(found, key=lambda c: c["step_seconds"])
            error = best["step_seconds"] * 1e3 / measured - 1
            if run["is_plan"]:
                errors.append(error)
            lines.append(
                f"| {entry['model']} | {entry['budget']} | {describe(run['settings'])} | "
                f"{'yes' if run['is_plan'] else ''} | {measured:.1f} | "
                f"{best['step_seconds'] * 1e3:.1f} | {error:+.1%} | {best['bound']} |"
            )
    within = sum(1 for e in errors if abs(e) <= 0.15)
    lines += ["", f"plans' predicted step time within 15%: {within} of {len(errors)}"]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("files", type=Path, nargs="+")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--plans", type=Path, help="the plans file the runs were of")
    args = parser.parse_args()
    entries = [e for f in args.files for e in json.loads(f.read_text())["rows"]]
    rows = [row(e) for e in entries]
    lines = [
        "| workload | budget | plan | plan ms | fastest that ran | its ms | plan / best "
        "| OOM under the cap | full ckpt ms | plan over full |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        over = (
            f"{r['over_full']:+.0%}"
            if r["over_full"] is not None
            else "(plan is full)"
            if "full" in r["plan"]
            else "-"
        )
        full = f"{r['full_ms']:.1f}" if r["full_ms"] else "-"
        lines.append(
            f"| {r['model']} | {r['budget']} | {r['plan']} | {r['plan_ms']:.1f} | {r['best']} | "
            f"{r['best_ms']:.1f} | {r['share_of_best']:.1%} | {r['oom']} of "
            f"{r['oom'] + r['ran']} | {full} | {over} |"
        )
    at_least = sum(1 for r in rows if r["share_of_best"] >= 0.95)
    lines.append("")
    lines.append(f"plan >= 95% of the best that ran: {at_least} of {len(rows)}")
    if args.plans:
        lines += ["", *predicted_lines(entries, args.plans)]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
