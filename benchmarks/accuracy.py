"""Estimate the validation set and compare with GPU measurements (benchmarks/gpu_measure.py).

    PYTHONPATH=src python benchmarks/accuracy.py MEASURED.json [MEASURED2.json ...] --out DIR

Writes DIR/accuracy.json and DIR/accuracy.md: estimate vs measured peak allocated and reserved,
with the environment the estimates ran in (they run on the CPU; no GPU is touched).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workloads import HELD_OUT, WORKLOADS, estimate_entry

GIB = 2**30


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("measured", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", nargs="*")
    args = parser.parse_args()

    import torch
    import transformers

    measured: dict[str, dict] = {}
    meta: dict = {}
    for path in args.measured:
        data = json.loads(path.read_text())
        meta.setdefault("measured_files", []).append(path.name)
        meta["measured_date"] = data["meta"]["date"]
        for row in data["rows"]:
            if "error" not in row:
                measured[row["id"]] = row
    rows = []
    held_out_ids = {e["id"] for e in HELD_OUT}
    for entry in WORKLOADS + HELD_OUT:
        if args.only and entry["id"] not in args.only:
            continue
        real = measured.get(entry["id"])
        if real is None:
            continue
        start = time.perf_counter()
        try:
            est = estimate_entry(entry)
        except Exception as exc:
            rows.append({"id": entry["id"], "error": f"{type(exc).__name__}: {exc}"})
            print(f"{entry['id']:45s} ERROR {exc}", flush=True)
            continue
        seconds = time.perf_counter() - start
        row = {
            "id": entry["id"],
            "held_out": entry["id"] in held_out_ids,
            "estimate_allocated": est.peak_allocated,
            "estimate_reserved": est.peak_reserved,
            "measured_allocated": real["peak_allocated"],
            "measured_reserved": real["peak_reserved"],
            "error_allocated_pct": 100
            * (est.peak_allocated - real["peak_allocated"])
            / real["peak_allocated"],
            "error_reserved_pct": 100
            * (est.peak_reserved - real["peak_reserved"])
            / real["peak_reserved"],
            "estimate_seconds": round(seconds, 2),
            "notes": est.notes,
        }
        rows.append(row)
        print(
            f"{entry['id']:45s} alloc {row['error_allocated_pct']:+7.2f}%  reserved "
            f"{row['error_reserved_pct']:+7.2f}%  ({seconds:.1f} s)",
            flush=True,
        )

    def summarize(subset: list[dict]) -> dict:
        ok = [r for r in subset if "error" not in r]
        alloc = [abs(r["error_allocated_pct"]) for r in ok]
        res = [abs(r["error_reserved_pct"]) for r in ok]
        return {
            "workloads": len(subset),
            "failed": len(subset) - len(ok),
            "median_abs_error_allocated_pct": statistics.median(alloc) if ok else None,
            "max_abs_error_allocated_pct": max(alloc) if ok else None,
            "median_abs_error_reserved_pct": statistics.median(res) if ok else None,
            "max_abs_error_reserved_pct": max(res) if ok else None,
        }

    summary = {
        "fitted": summarize([r for r in rows if not r.get("held_out")]),
        "held_out": summarize([r for r in rows if r.get("held_out")]),
    }
    env = {
        "estimated_on": platform.node() or "cpu",
        "estimate_date": dt.date.today().isoformat(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "command": " ".join(sys.argv),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "accuracy.json").write_text(
        json.dumps({"meta": {**meta, **env}, "summary": summary, "rows": rows}, indent=1)
    )
    lines = [
        f"Estimates (torch {env['torch']}, transformers {env['transformers']}, "
        f"{env['estimate_date']}) vs measured on an NVIDIA H200 ({meta.get('measured_date')}).",
        "",
        "| workload | est. alloc GiB | real alloc GiB | err | est. reserved GiB | "
        "real reserved GiB | err |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['id']} | failed: {r['error'][:80]} | | | | | |")
            continue
        lines.append(
            f"| {r['id']}{' (held out)' if r.get('held_out') else ''} | "
            f"{r['estimate_allocated'] / GIB:.3f} | "
            f"{r['measured_allocated'] / GIB:.3f} | {r['error_allocated_pct']:+.2f}% | "
            f"{r['estimate_reserved'] / GIB:.3f} | {r['measured_reserved'] / GIB:.3f} | "
            f"{r['error_reserved_pct']:+.2f}% |"
        )
    lines += ["", "Summary: " + json.dumps(summary)]
    (args.out / "accuracy.md").write_text("\n".join(lines) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
