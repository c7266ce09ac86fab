"""On a real GPU: activation offload computes the gradients it computes without, its copies on
a side stream, and the peaks are the estimate's."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

GRADIENTS = """
import json, torch, transformers
from memfit.technique.checkpointing import checkpoint_blocks
from memfit.technique.offload import offload_blocks
CHECKPOINTS = {checkpoints!r}

def model():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=4, n_embd=512, n_head=8, resid_pdrop=0.0,
                                  embd_pdrop=0.0, attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(cfg).cuda()

ids = torch.randint(0, 50257, (8, 512), generator=torch.Generator().manual_seed(1)).cuda()
torch.use_deterministic_algorithms(True)
def grads(m):
    m(input_ids=ids, labels=ids).loss.backward()
    return {n: p.grad for n, p in m.named_parameters()}
plain = grads(model())
m = model()
if CHECKPOINTS:
    checkpoint_blocks(m, selective=False)
offload = offload_blocks(m, 0.0 if CHECKPOINTS else 1.0, checkpoints=CHECKPOINTS)
torch.cuda.reset_peak_memory_stats()
got = grads(m)
worst = max(float((got[n] - g).abs().max()) for n, g in plain.items())
print(json.dumps([worst, len(offload.offloaded)]))
"""

MEASURE = """
import json
from memfit.estimator._estimate import estimate_workload
from memfit.estimator._measure import measure
from memfit.workload import make_workload
w = make_workload("gpt2", gpu="h200", batch_size=8, seq_len=1024, precision="bf16-mixed",
                  **{settings!r})
e = estimate_workload(w)
m, _ = measure(w)
print(json.dumps([e.peak_allocated, e.peak_reserved, m.peak_allocated, m.peak_reserved]))
"""


def _run(code: str) -> list[float]:
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"CUBLAS_WORKSPACE_CONFIG": ":4096:8", **__import__("os").environ},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("checkpoints", [False, True])
def test_offloaded_gradients_are_the_ones_computed_without(checkpoints: bool) -> None:
    # checkpoints: every block checkpointed, its inputs offloaded
    worst, offloaded = _run(GRADIENTS.replace("{checkpoints!r}", repr(checkpoints)))
    assert offloaded == 4
    assert worst == 0.0


@pytest.mark.parametrize(
    "settings",
    [
        {"offload": 1.0},
        {"offload": 0.5},
        {"activation_checkpointing": True, "offload_checkpoints": True},
        {"activation_checkpointing": 0.5, "offload": 1.0, "offload_checkpoints": True},
    ],
)
def test_an_offloaded_step_peaks_as_estimated(settings: dict[str, object]) -> None:
    est_alloc, est_res, real_alloc, real_res = _run(MEASURE.format(settings=settings))
    assert abs(est_alloc - real_alloc) <= 0.01 * real_alloc
    assert abs(est_res - real_res) <= 0.02 * real_res
