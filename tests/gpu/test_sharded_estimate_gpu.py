"""On a real GPU: rank 0 of an FSDP2 or DeepSpeed ZeRO-3 job peaks as memfit estimates it on
the CPU. A world of four runs on one GPU with PyTorch's fake process group answering the
collectives (what rank 0 allocates, NCCL's own memory aside); the estimate and the measurement
run in separate processes. ZeRO needs DeepSpeed on the GPU host (skipped without it; its wheels
can be carried there: ``benchmarks/results/2026-12-02-h200-zero-frameworks``)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

SETUP = """
import json
from memfit.workload import make_workload
w = make_workload("gpt2", gpu="h200", batch_size=4, seq_len=512, strategy={strategy!r},
                  world_size=4, **{options!r})
"""
ESTIMATE = """
from memfit.estimator._estimate import estimate_workload
e = estimate_workload(w)
print(json.dumps([e.peak_allocated, e.peak_reserved]))
"""
MEASURE = """
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore
from memfit.estimator._measure import measure
dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
m, _ = measure(w)
print(json.dumps([m.peak_allocated, m.peak_reserved]))
"""


def _run(strategy: str, code: str, **options: object) -> list[int]:
    env = dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="4")  # as torchrun sets them
    script = SETUP.format(strategy=strategy, options=options) + code
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("strategy", ["fsdp2", "zero3"])
def test_a_sharded_rank_peaks_as_estimated(strategy: str) -> None:
    if strategy == "zero3" and importlib.util.find_spec("deepspeed") is None:
        pytest.skip("deepspeed is not installed on this host")
    est_alloc, est_res = _run(strategy, ESTIMATE)
    real_alloc, real_res = _run(strategy, MEASURE)
    assert abs(est_alloc - real_alloc) <= 0.01 * real_alloc
    assert abs(est_res - real_res) <= 0.02 * real_res


@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
def test_an_fsdp2_rank_with_its_shards_on_the_host_peaks_as_estimated(precision: str) -> None:
    """FSDP2's CPU offload policy: the shards in pinned host memory, copied to the GPU for each
    all-gather, the gradients copied back, the optimizer stepped on the host."""
    options = {"offload_shards": True, "precision": precision}
    est_alloc, est_res = _run("fsdp2", ESTIMATE, **options)
    real_alloc, real_res = _run("fsdp2", MEASURE, **options)
    kept_alloc, _ = _run("fsdp2", MEASURE, precision=precision)
    print(
        f"offload {precision}: estimated {est_alloc} / {est_res}, measured {real_alloc} / "
        f"{real_res}, shards on the GPU {kept_alloc}"
    )
    assert real_alloc < kept_alloc  # the offload is real on the GPU too
    assert abs(est_alloc - real_alloc) <= 0.01 * real_alloc
    assert abs(est_res - real_res) <= 0.02 * real_res


VALIDATE = """
import json, os, memfit
v = memfit.validate("gpt2", batch_size=4, seq_len=512, strategy="fsdp2", world_size=4)
print(json.dumps([v.estimate.peak_allocated, v.estimate.peak_reserved, v.measured.peak_allocated,
                  v.measured.peak_reserved, list(v.measured.notes), "RANK" in os.environ]))
"""


def test_validate_measures_rank_0_of_a_sharded_job_on_one_gpu() -> None:
    # no group and no launcher's variables set up by the caller: validate makes the fake group
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    out = subprocess.run([sys.executable, "-c", VALIDATE], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    est_alloc, est_res, alloc, res, notes, rank_left = json.loads(out.stdout.splitlines()[-1])
    assert abs(est_alloc - alloc) <= 0.01 * alloc
    assert abs(est_res - res) <= 0.02 * res
    assert notes and "rank 0 of 4 measured on this one GPU" in notes[0]
    assert not rank_left  # the launcher's variables are put back (here: none)
