"""Concatenations and elementwise ops by the kernel CUDA ran them with, against the bandwidth.

    PYTHONPATH=src python benchmarks/kernel_families.py PROFILE.json [...] > FAMILIES.jsonl

For each configuration ``op_profile.py`` profiled: the GPU milliseconds measured of each
family the trace splits by kernel (``op_compare.measured_parts``: concatenations into ``cat``,
``cat_strided`` and per-input ``copy``; elementwise ops into vectorized ``mem:``,
``ew_unrolled`` and ``ew_strided``) and what the bandwidth alone gives for the bytes the trace
counts in each (``memfit.trace._kernel_choice``), with the dtypes the trace ran each in. Their
ratio is the family's factor, which ``calibration_add.py --mem-factors`` fits as the median
over configurations.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from op_compare import family_seconds
from results_io import is_profile_meta, read_json

from memfit.planner import Calibration

SHIPPED = Path(__file__).parents[1] / "src/memfit/planner/data/h200.json"
FAMILIES = ("mem:cat", "mem:cat_strided", "mem:copy", "mem:", "mem:ew_unrolled", "mem:ew_strided")


def main(paths: list[str]) -> int:
    calibration = json.loads(SHIPPED.read_text())
    bandwidth_only = Calibration.from_dict({**calibration, "mem_factors": {}})
    for path in (Path(p) for p in paths if not is_profile_meta(p)):
        for row in read_json(path):
            if "ops" not in row.get("profile", {}):
                continue
            measured, predicted, dtypes = family_seconds(row, bandwidth_only)
            out = {"file": str(path).partition("results/")[2], "model": row["model"]}
            out["settings"] = row["settings"]
            for kind in FAMILIES:
                out[kind] = {
                    "measured_ms": round(measured.get(kind, 0.0) * 1e3, 3),
                    "bandwidth_ms": round(predicted.get(kind, 0.0) * 1e3, 3),
                    "dtypes": sorted(dtypes.get(kind, [])),
                }
            print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
