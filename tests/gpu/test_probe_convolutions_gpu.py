"""On a real GPU: ``memfit.probe_convolutions`` measures the convolutions memfit's table lacks,
and the estimate made after it matches what the GPU measures."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

MODEL = "tests/gpu/models/odd_convolutions.py:make_model"


def test_probed_convolutions_make_the_estimate_match_the_gpu(tmp_path):
    # in a fresh process with a folder of its own for this machine's probes
    code = (
        "import json, memfit\n"
        "from memfit.estimator._estimate import estimate_workload\n"
        "from memfit.estimator._measure import measure\n"
        "from memfit.workload._models import resolve_model\n"
        "from memfit.workload import make_workload\n"
        f"w = make_workload(resolve_model({MODEL!r}), batch_size=24, gpu='h100')\n"
        "before = estimate_workload(w)\n"
        "found = memfit.probe_convolutions(w)\n"
        "again = memfit.probe_convolutions(w)\n"
        "after = estimate_workload(w)\n"
        "m, _ = measure(w)\n"
        "print(json.dumps({'found': found.to_dict(), 'again': again.to_dict(),\n"
        "  'before': before.notes, 'after': after.notes,\n"
        "  'peaks': [after.peak_allocated, after.peak_reserved, m.peak_allocated,\n"
        "            m.peak_reserved]}))\n"
    )
    env = {**os.environ, "MEMFIT_CUDNN_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert any("no measured cuDNN workspace" in n for n in result["before"])
    assert result["found"]["probed"] == result["found"]["missing"] >= 2
    assert result["again"]["missing"] == 0  # kept: nothing left to probe
    assert not any("no measured cuDNN workspace" in n for n in result["after"])
    assert any("probed on this machine" in n for n in result["after"])
    est_alloc, est_res, gpu_alloc, gpu_res = result["peaks"]
    assert abs(est_alloc / gpu_alloc - 1) <= 0.01
    assert abs(est_res / gpu_res - 1) <= 0.02
