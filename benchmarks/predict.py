"""Estimates of validation workloads before they are measured: a held-out check.

    PYTHONPATH=src python benchmarks/predict.py --only ID [ID ...] --out FILE.json

Writes each workload's estimated peak allocated and reserved bytes (for an H200) with the
versions and date, so that a later measurement (``gpu_measure.py``) is compared against a
prediction made, and committed, before it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workloads import ALL, estimate_entry


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="+", required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    import torch
    import transformers

    rows = []
    for entry in ALL:
        if entry["id"] not in args.only:
            continue
        est = estimate_entry(entry)
        rows.append(
            {
                "id": entry["id"],
                "estimate_allocated": est.peak_allocated,
                "estimate_reserved": est.peak_reserved,
                "notes": est.notes,
            }
        )
        print(entry["id"], est.peak_allocated, est.peak_reserved, est.notes, flush=True)
    meta = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "deepspeed": _version("deepspeed"),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


def _version(package: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    raise SystemExit(main())
