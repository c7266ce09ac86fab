"""find_batch_size on a real GPU: the batch it returns runs, and 5% more does not fit.

The GPU is made small with ``set_per_process_memory_fraction`` (in a fresh process), so the
test is quick on a large card and "does not fit" is a real out-of-memory error.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

CHILD = """
import json, math, torch, memfit
from memfit.estimator._measure import measure
from memfit.workload._models import resolve_model
from memfit._units import GiB
from memfit.workload import make_workload

size = 12 * GiB
gpu = memfit.GPU("12 GiB slice", size)
total = torch.cuda.get_device_properties(0).total_memory
# the allocator may hold what the slice has beyond the CUDA context
torch.cuda.set_per_process_memory_fraction((size - gpu.context) / total)
result = memfit.find_batch_size("gpt2", seq_len=512, gpu=gpu, margin=0.0)
recipe = resolve_model("gpt2")

def runs(b):
    try:
        measure(make_workload(recipe, batch_size=b, seq_len=512))
        return True
    except torch.OutOfMemoryError:
        return False

larger = math.ceil(result.batch_size * 1.05)
precision = torch.get_float32_matmul_precision()  # the trials' TF32 is undone
print("RESULT", json.dumps({"result": result.to_dict(), "fits": runs(result.batch_size),
                            "larger": larger, "larger_fits": runs(larger),
                            "precision": precision}))
"""


def test_found_batch_runs_and_five_percent_more_does_not():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(s for s in out.stdout.splitlines() if s.startswith("RESULT "))
    data = json.loads(line[len("RESULT ") :])
    result = data["result"]
    assert result["confirmed"] and 1 <= len(result["trials"]) <= 3
    assert data["fits"], result
    assert data["precision"] == "highest"
    assert not data["larger_fits"] or result["limited_by"] == "max_batch", result


def test_estimate_only_does_not_initialise_cuda():
    code = (
        "import torch, memfit\n"
        "r = memfit.find_batch_size('gpt2', seq_len=128, gpu='24GiB', confirm=False)\n"
        "assert not torch.cuda.is_initialized(), 'CUDA was initialised'\n"
        "print(r.batch_size)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.strip().splitlines()[-1]) > 0


PRECISION_CHILD = """
import json, torch
import memfit.estimator
from memfit.runtime._bs_trials import cuda_runner
from memfit.workload import make_workload

seen = []
measure = memfit.estimator.measure

def recording(workload, **kwargs):
    seen.append(torch.get_float32_matmul_precision())
    return measure(workload, **kwargs)

memfit.estimator.measure = recording
torch.set_float32_matmul_precision("highest")
def workload_at(n):
    return make_workload("bert-base-uncased", batch_size=n, seq_len=128)

run = cuda_runner(workload_at, 20 * 2**30)
run(4)
print("RESULT", json.dumps({"during": seen, "after": torch.get_float32_matmul_precision()}))
"""


def test_trials_run_at_the_callers_matmul_precision():
    """A trial measures the step the user runs: fp32 products in the precision the caller set
    (TF32 changes cuBLAS's kernels and the peaks with them)."""
    out = subprocess.run([sys.executable, "-c", PRECISION_CHILD], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(s for s in out.stdout.splitlines() if s.startswith("RESULT "))
    seen = json.loads(line[len("RESULT ") :])
    assert seen == {"during": ["highest"], "after": "highest"}


def test_cli_confirm_runs_a_trial_and_reports_it():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "memfit",
            "estimate",
            "gpt2",
            "-s",
            "128",
            "--max-batch-size",
            "--confirm",
            "--json",
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    assert data["confirmed"] and 1 <= len(data["trials"]) <= 3
    chosen = [t for t in data["trials"] if t["batch_size"] == data["batch_size"]]
    assert chosen and chosen[0]["fits"] and chosen[0]["alloc_retries"] is not None
