"""The DDP step whose GPU peak was a gradients' size above its estimate (2026-12-02), run as
the GPU test runs it: estimated on the meta device first, then measured in the same process,
with the allocator trace. Its fresh-process measurement is exact
(results/2026-12-02-h200-fsdp2-ranks/).

    PYTHONPATH=src python benchmarks/ddp_gap.py OUT_DIR
"""

from __future__ import annotations

import gzip
import json
import pickle
import sys
from pathlib import Path

from memfit.estimator._estimate import estimate_workload
from memfit.estimator._measure import measure
from memfit.workload import make_workload


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    workload = make_workload("gpt2", gpu="h200", batch_size=4, seq_len=512, strategy="ddp")
    estimate = estimate_workload(workload)
    result, snapshot = measure(workload, record_history=True)
    row = {
        "estimate_allocated": estimate.peak_allocated,
        "estimate_reserved": estimate.peak_reserved,
        **result.to_dict(),
    }
    (out / "ddp_gap.json").write_text(json.dumps(row, indent=1))
    with gzip.open(out / "trace-ddp-after-estimate.pickle.gz", "wb") as fh:
        pickle.dump(snapshot, fh)
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
