"""On a real GPU: estimates never touch it, and they match what it measures."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu


def test_estimate_does_not_initialise_cuda():
    code = (
        "import torch, memfit\n"
        "memfit.estimate('gpt2', batch_size=1, seq_len=64)\n"
        "assert not torch.cuda.is_initialized(), 'CUDA was initialised'\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "ok" in out.stdout


@pytest.mark.parametrize(
    ("model", "kwargs"),
    [
        ("gpt2", {"batch_size": 2, "seq_len": 512}),
        ("bert-base-uncased", {"batch_size": 4, "seq_len": 256, "precision": "bf16-mixed"}),
        # memfit's own gradient accumulation: the gradients stay through the next micro-batch
        ("gpt2", {"batch_size": 2, "seq_len": 512, "accumulation": 3}),
        # memfit's selective checkpointing of a Hugging Face model's blocks
        ("gpt2", {"batch_size": 4, "seq_len": 512, "activation_checkpointing": "selective"}),
        # partial checkpointing: half the blocks checkpointed in full (memfit's wrapping)
        ("gpt2", {"batch_size": 4, "seq_len": 512, "activation_checkpointing": 0.5}),
        ("tv:resnet50", {"batch_size": 32, "activation_checkpointing": 0.25}),
        # blocks checkpointed selectively (matrix products saved, the rest recomputed)
        ("tests/gpu/models/selective_checkpoint.py:make_model", {"batch_size": 32}),
        (
            "tests/gpu/models/selective_checkpoint.py:make_model",
            {"batch_size": 32, "precision": "bf16-mixed"},
        ),
    ],
)
def test_estimate_matches_the_gpu(model, kwargs):
    # each workload in a fresh process, as memfit validate does for a user
    code = (
        "import json, torch\n"
        "from memfit.estimator._estimate import estimate_workload\n"
        "from memfit.estimator._measure import measure\n"
        "from memfit.workload._models import resolve_model\n"
        "from memfit.workload import make_workload\n"
        f"r = resolve_model({model!r}); w = make_workload(r, gpu='h200', **{kwargs!r})\n"
        "e = estimate_workload(w)\n"
        "m, _ = measure(w)\n"
        "print(json.dumps([e.peak_allocated, e.peak_reserved, m.peak_allocated,"
        " m.peak_reserved]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    import json

    est_alloc, est_res, real_alloc, real_res = json.loads(out.stdout.strip().splitlines()[-1])
    assert abs(est_alloc - real_alloc) <= 0.02 * real_alloc
    assert abs(est_res - real_res) <= 0.05 * real_res


def test_validate_cli_runs(capsys):
    from memfit.cli import main

    assert main(["validate", "gpt2", "-b", "1", "-s", "128"]) == 0
    assert "peak allocated" in capsys.readouterr().out


def test_validate_in_python_applies_the_allocator_config():
    # a fresh process: the setting must be in place before CUDA starts
    code = (
        "import json, memfit\n"
        "v = memfit.validate('gpt2', batch_size=2, seq_len=256,"
        " allocator_config='expandable_segments:True')\n"
        "print(json.dumps([v.measured.allocator_config,"
        " [v.error(e, m) for _, e, m in v.rows()]]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    import json

    config, errors = json.loads(out.stdout.strip().splitlines()[-1])
    assert config == "expandable_segments:True"
    allocated, reserved = errors[0], errors[1]
    assert abs(allocated) <= 0.02 and abs(reserved) <= 0.05
