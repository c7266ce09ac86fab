"""On a real GPU: one DDP rank (NCCL, a world of one) peaks as memfit estimates it on the CPU,
DDP's gradient buckets included. The one configuration measured so far is a gradients' size
above the estimate, cause not found: a strict xfail, which fails once it is explained."""

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


@pytest.mark.xfail(
    strict=True,
    reason="on the H200 this step peaked at 6.124 GB allocated where memfit estimates 5.626, "
    "497.8 MB more: a gradients' size, in step 2's backward; the allocator traces of three "
    "other DDP steps (GPT-2 bf16-mixed 8 x 1024, BERT-base, TinyLlama) match the trace event "
    "for event, so the cause is not found yet (session 14)",
)
def test_a_ddp_rank_peaks_as_estimated() -> None:
    out = subprocess.run([sys.executable, "-c", MEASURE], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    est_alloc, est_res, real_alloc, real_res, plain = json.loads(out.stdout.splitlines()[-1])
    assert est_alloc > plain  # the buckets are counted
    assert abs(est_alloc - real_alloc) <= 0.01 * real_alloc
    assert abs(est_res - real_res) <= 0.02 * real_res
