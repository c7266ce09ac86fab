"""On a real GPU: rank 0 of an FSDP2 job peaks as memfit estimates it on the CPU. A world of
four runs on one GPU with PyTorch's fake process group answering the collectives (what rank 0
allocates, NCCL's own memory aside); the estimate and the measurement run in separate
processes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

SETUP = """
import json
from memfit.workload import make_workload
w = make_workload("gpt2", gpu="h200", batch_size=4, seq_len=512, strategy="fsdp2",
                  world_size=4)
"""
ESTIMATE = (
    SETUP
    + """
from memfit.estimator._estimate import estimate_workload
e = estimate_workload(w)
print(json.dumps([e.peak_allocated, e.peak_reserved]))
"""
)
MEASURE = (
    SETUP
    + """
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore
from memfit.estimator._measure import measure
dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
m, _ = measure(w)
print(json.dumps([m.peak_allocated, m.peak_reserved]))
"""
)


def _run(code: str) -> list[int]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def test_an_fsdp2_rank_peaks_as_estimated() -> None:
    est_alloc, est_res = _run(ESTIMATE)
    real_alloc, real_res = _run(MEASURE)
    assert abs(est_alloc - real_alloc) <= 0.01 * real_alloc
    assert abs(est_res - real_res) <= 0.02 * real_res
