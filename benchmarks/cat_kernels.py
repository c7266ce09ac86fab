"""Concatenations by the kernel CUDA ran them with, against the bandwidth (issue 13).

    PYTHONPATH=src python benchmarks/cat_kernels.py PROFILE.json [...] > cat-kernels.jsonl

For each configuration ``op_profile.py`` profiled: the GPU milliseconds of its concatenations
measured (split by kernel: ``CatArrayBatchedCopy`` strided, the batched kernels for contiguous
inputs, copies input by input) and what the bandwidth alone gives for the bytes the trace
counts in each family (``cat``, ``cat_strided``, ``copy``: ``memfit.trace``'s ``cat_family``),
with the dtypes the trace ran each in. Their ratio is the family's factor, which
``calibration_add.py --mem-factors`` fits as the median over configurations.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from op_compare import family_seconds

from memfit.planner import Calibration

SHIPPED = Path(__file__).parents[1] / "src/memfit/planner/data/h200.json"


def main(paths: list[str]) -> int:
    calibration = json.loads(SHIPPED.read_text())
    bandwidth_only = Calibration.from_dict({**calibration, "mem_factors": {}})
    for path in (Path(p) for p in paths if not p.endswith("meta.json")):
        for row in json.loads(path.read_text()):
            if "ops" not in row.get("profile", {}):
                continue
            measured, predicted, dtypes = family_seconds(row, bandwidth_only)
            out = {"file": str(path).partition("results/")[2], "model": row["model"]}
            out["settings"] = row["settings"]
            for kind in ("mem:cat", "mem:cat_strided", "mem:copy"):
                out[kind] = {
                    "measured_ms": round(measured.get(kind, 0.0) * 1e3, 3),
                    "bandwidth_ms": round(predicted.get(kind, 0.0) * 1e3, 3),
                    "dtypes": sorted(dtypes.get(kind, [])),
                }
            print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
