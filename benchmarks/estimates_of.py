"""Estimates of named workloads of ``workloads.py``, written as JSON, to compare two versions of
memfit on the same workloads (run once from each checkout; CPU only).

    PYTHONPATH=src python benchmarks/estimates_of.py OUT.json ID [ID ...]

Writes ``{id: [peak allocated, peak reserved]}``;
``results/2026-12-02-cpu-offloaded-inputs-predictions/trace-changes.md`` sets two such files
beside earlier GPU measurements.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workloads import ALL, estimate_entry


def main() -> int:
    out, ids = Path(sys.argv[1]), sys.argv[2:]
    found = {}
    for entry in ALL:
        if entry["id"] in ids:
            est = estimate_entry(entry)
            found[entry["id"]] = [est.peak_allocated, est.peak_reserved]
            print(entry["id"], found[entry["id"]], flush=True)
    missing = sorted(set(ids) - set(found))
    if missing:
        raise SystemExit(f"unknown workload ids: {', '.join(missing)}")
    out.write_text(json.dumps(found, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
