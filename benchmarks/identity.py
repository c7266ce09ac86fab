"""Everything memfit prints for the validation set and the recorded traces, as one JSON file, so
that a refactor can be shown to change nothing: run it before and after, then compare.

    PYTHONPATH=src python benchmarks/identity.py --out before.json [--only ID ...]
    python benchmarks/identity.py --compare before.json after.json
    python benchmarks/identity.py --compare-zoo before.jsonl after.jsonl

The zoo sweep's estimates (``zoo.py estimate``, run before and after) compare the same way:
every row's peaks, notes and error, its seconds aside.

For every validation workload (``workloads.WORKLOADS + HELD_OUT``), the estimate for an H200
(``Estimate.to_dict()`` without its timing, plus a SHA-256 of its allocated and reserved
timelines); for every GPU trace under ``results/2026-11-30-h200-estimate-accuracy/traces``,
``memfit snapshot FILE --json`` and the text report as the command prints them (80 columns).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from results_io import read_json

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
ROOT = HERE.parent
TRACES = HERE / "results" / "2026-11-30-h200-estimate-accuracy" / "traces"


def _estimates(only: list[str] | None) -> dict[str, Any]:
    from workloads import HELD_OUT, WORKLOADS, estimate_entry

    out: dict[str, Any] = {}
    for entry in WORKLOADS + HELD_OUT:
        if only and entry["id"] not in only:
            continue
        start = time.perf_counter()
        est = estimate_entry(entry)
        data = est.to_dict()
        data.pop("trace_seconds", None)
        digest = hashlib.sha256()
        for series in (est.timeline.allocated, est.timeline.reserved):
            digest.update(json.dumps([int(x) for x in series]).encode())
        data["timeline_sha256"] = digest.hexdigest()
        data["phases"] = [list(p) for p in est.timeline.phases]
        out[entry["id"]] = data
        print(f"{entry['id']:50s} {time.perf_counter() - start:6.1f} s", flush=True)
    return out


def _snapshots(only: list[str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in sorted(TRACES.glob("*.pickle.gz")):
        key = path.name.removeprefix("trace-").removesuffix(".pickle.gz")
        if only and key not in only:
            continue
        # relative to the checkout, so that two checkouts print the same header
        cmd = [sys.executable, "-m", "memfit", "snapshot", str(path.relative_to(ROOT))]
        env = {"COLUMNS": "80", "PATH": "/usr/bin:/bin", "TERM": "dumb"}
        if "PYTHONPATH" in os.environ:  # the tree under test, not the installed one
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        run = {"capture_output": True, "text": True, "env": env, "cwd": ROOT}
        as_json = subprocess.run([*cmd, "--json"], **run)  # type: ignore[call-overload]
        text = subprocess.run(cmd, **run)  # type: ignore[call-overload]
        data = json.loads(as_json.stdout) if as_json.returncode == 0 else as_json.stderr
        out[key] = {"json": data, "text": text.stdout, "rc": [as_json.returncode, text.returncode]}
        print(f"snapshot {key:41s} rc {as_json.returncode} {text.returncode}", flush=True)
    return out


def _compare(before_path: Path, after_path: Path) -> int:
    before = read_json(before_path)
    after = read_json(after_path)
    differ = 0
    for part in ("estimates", "snapshots"):
        keys = sorted(set(before[part]) | set(after[part]))
        same = [k for k in keys if before[part].get(k) == after[part].get(k)]
        for key in keys:
            if key not in same:
                differ += 1
                print(f"{part}: {key} differs")
        print(f"{part}: {len(same)} of {len(keys)} identical")
    return 1 if differ else 0


def _compare_zoo(before_path: Path, after_path: Path) -> int:
    """Each zoo row of ``before_path`` against ``after_path``'s, its time left out."""

    def rows(path: Path) -> dict[str, dict[str, Any]]:
        out = {}
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if "id" in row:
                row.pop("seconds", None)
                out[row["id"]] = row
        return out

    before, after = rows(before_path), rows(after_path)
    keys = sorted(set(before) | set(after))
    differ = [k for k in keys if before.get(k) != after.get(k)]
    for key in differ:
        print(f"zoo: {key} differs")
    print(f"zoo: {len(keys) - len(differ)} of {len(keys)} identical")
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--only", nargs="*")
    parser.add_argument(
        "--parts", nargs="+", choices=("estimates", "snapshots"), default=["estimates", "snapshots"]
    )
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--compare-zoo", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.compare:
        return _compare(*args.compare)
    if args.compare_zoo:
        return _compare_zoo(*args.compare_zoo)
    if args.out is None:
        parser.error("give --out FILE (or --compare BEFORE AFTER)")
    import torch
    import transformers

    result = {
        "meta": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": sys.version.split()[0],
        },
        "estimates": _estimates(args.only) if "estimates" in args.parts else {},
        "snapshots": _snapshots(args.only) if "snapshots" in args.parts else {},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
