"""The table of ``plan_versus.py``'s results: per plan, its measured step beside the fastest
configuration that ran under the same cap and the fastest full checkpointing that ran.

    python benchmarks/versus_table.py VERSUS.json ... [--out FILE.md]

Throughput is samples per second at the same global batch, so the plan's share of the best is
best step time / plan's step time. "Faster than full" is only shown where full checkpointing is
not the plan itself.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("files", type=Path, nargs="+")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = [row(e) for f in args.files for e in json.loads(f.read_text())["rows"]]
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
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
