"""Predictions (``predict.py``) against measurements (``gpu_measure.py``), as a Markdown table:
each workload's error in peak allocated and reserved, and whether it is within 1% allocated and
2% reserved with none under the truth by more than 1% reserved.

    python benchmarks/held_out_compare.py PREDICTIONS.json MEASURED.json [--only ID ...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("predictions", type=Path)
    parser.add_argument("measured", type=Path)
    parser.add_argument("--only", nargs="*")
    args = parser.parse_args()
    predicted = {r["id"]: r for r in json.loads(args.predictions.read_text())["rows"]}
    measured = {r["id"]: r for r in json.loads(args.measured.read_text())["rows"]}
    print("| workload | allocated | reserved | within |")
    print("| --- | ---: | ---: | --- |")
    within = total = 0
    for key, p in predicted.items():
        if args.only and key not in args.only:
            continue
        m = measured.get(key)
        if m is None or "error" in m:
            print(f"| {key} | | | {'not measured' if m is None else 'failed on the GPU'} |")
            continue
        alloc = (p["estimate_allocated"] - m["peak_allocated"]) / m["peak_allocated"] * 100
        res = (p["estimate_reserved"] - m["peak_reserved"]) / m["peak_reserved"] * 100
        ok = abs(alloc) <= 1 and abs(res) <= 2
        within += ok
        total += 1
        print(f"| {key} | {alloc:+.2f}% | {res:+.2f}% | {'yes' if ok else 'no'} |")
    print(f"\n{within} of {total} within 1% allocated and 2% reserved.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
