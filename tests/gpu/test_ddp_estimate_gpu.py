"""On a real GPU: one DDP rank (NCCL, a world of one) peaks as memfit estimates it on the CPU,
DDP's gradient buckets included. This step once measured a gradients' size above its estimate
(6.124 GB, benchmarks/results/2026-12-02-h200-activation-offload), then three times (alone,
after an estimate in the same process, and here; 2026-12-02-h200-fsdp2-ranks) at the estimate
to 36 KB, the gap gone without a change to the DDP code."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

MEASURE = """
import json
from memfit.estimator._estimate import estimate_workload
from memfit.estimator._measure import measure
from memfit.workload import make_workload
w = make_workload("gpt2", gpu="h200", batch_size=4, seq_len=512, strategy="ddp")
e = estimate_workload(w)
m, _ = measure(w)
plain = estimate_workload(make_workload("gpt2", gpu="h200", batch_size=4, seq_len=512))
print(json.dumps([e.peak_allocated, e.peak_reserved, m.peak_allocated, m.peak_reserved,
                  plain.peak_allocated]))
"""


def test_a_ddp_rank_peaks_as_estimated() -> None:
    out = subprocess.run([sys.executable, "-c", MEASURE], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    est_alloc, est_res, real_alloc, real_res, plain = json.loads(out.stdout.splitlines()[-1])
    assert est_alloc > plain  # the buckets are counted
    # the first step's buckets are held through the second, as NCCL's watchdog may hold them
    # (6.124 GB measured on 2026-12-02 and 2026-12-03); where it lets them go sooner, the step
    # peaks a bucket set (the gradients' size, 498 MB) lower (5.626 GB, twice on 2026-12-02):
    # never above
    buckets = 124_439_808 * 4
    assert real_alloc <= est_alloc * 1.01
    assert est_alloc - real_alloc <= buckets + 0.01 * real_alloc
    assert real_res <= est_res * 1.02
