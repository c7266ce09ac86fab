"""On a real GPU: a user's own step (micro-batches, autocast, GradScaler, clipping; generation)
runs there as memfit traced it, and the estimate matches what the GPU measures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

JOB = """
import torch, transformers

def make_model():
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=4, n_embd=512, n_head=8))

def make_batch(batch_size, seq_len):
    ids = torch.randint(0, 50257, (batch_size, seq_len or 512))
    return {"input_ids": ids, "labels": ids}

SCALERS = {}

def step(model, batch, optimizer):
    scaler = SCALERS.setdefault("s", torch.amp.GradScaler("cuda"))
    for part in zip(*(v.chunk(2) for v in batch.values())):
        micro = dict(zip(batch, part))
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(**micro).loss / 2
        scaler.scale(loss).backward()
        del loss
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
"""

GENERATE = """
import torch, transformers

def make_model():
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
        num_attention_heads=16, num_key_value_heads=4))

def make_batch(batch_size, seq_len):
    ids = torch.randint(3, 32000, (batch_size, seq_len or 256))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

def step(model, batch):
    return model.generate(**batch, max_new_tokens=64, min_new_tokens=64, do_sample=False)
"""


def _estimate_and_measure(tmp_path: Path, source: str, **kwargs: object) -> list[int]:
    path = tmp_path / "job.py"
    path.write_text(source)
    code = (
        "import json\n"
        "from memfit.estimator._estimate import estimate_workload\n"
        "from memfit.estimator._measure import measure\n"
        "from memfit.workload import make_workload\n"
        f"w = make_workload({str(path) + ':make_model'!r}, gpu='h200', **{kwargs!r})\n"
        "e = estimate_workload(w)\n"
        "m, _ = measure(w)\n"
        "print(json.dumps([e.peak_allocated, e.peak_reserved, m.peak_allocated,"
        " m.peak_reserved]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_a_users_accumulating_fp16_step_matches_the_gpu(tmp_path: Path):
    est_alloc, est_res, real_alloc, real_res = _estimate_and_measure(
        tmp_path, JOB, batch_size=16, seq_len=512
    )
    assert abs(est_alloc - real_alloc) <= 0.01 * real_alloc
    assert abs(est_res - real_res) <= 0.02 * real_res


def test_generation_matches_the_gpu(tmp_path: Path):
    est_alloc, est_res, real_alloc, real_res = _estimate_and_measure(
        tmp_path, GENERATE, batch_size=8, seq_len=256, mode="infer", precision="bf16"
    )
    assert abs(est_alloc - real_alloc) <= 0.02 * real_alloc
    assert est_res >= 0.98 * real_res


COMPILED = """
import torch, transformers

def make_model():
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=4, n_embd=512, n_head=8))
    return torch.compile(model)

def make_batch(batch_size, seq_len):
    ids = torch.randint(0, 50257, (batch_size, seq_len or 512))
    return {"input_ids": ids, "labels": ids}
"""


def test_compiled_eager_is_measured_uncompiled_too(tmp_path: Path):
    # validate compares like with like: with compiled="eager" the GPU runs the eager step
    est_alloc, est_res, real_alloc, real_res = _estimate_and_measure(
        tmp_path, COMPILED, batch_size=8, seq_len=512, compiled="eager"
    )
    assert abs(est_alloc - real_alloc) <= 0.01 * real_alloc
    assert abs(est_res - real_res) <= 0.02 * real_res


# compiled as a whole (one graph: transformers' loss logging is a graph break otherwise)
COMPILED_WHOLE = COMPILED.replace(
    "    return torch.compile(model)",
    '    model.loss_type = "ForCausalLM"\n    return torch.compile(model)',
)


@pytest.fixture(scope="module")
def budget_zero(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[int], list[int]]:
    """The compiled step at budget 1.0 and at 0.0: estimated and measured."""
    tmp = tmp_path_factory.mktemp("budget")
    full = _estimate_and_measure(tmp, COMPILED_WHOLE, batch_size=8, seq_len=512)
    zero = _estimate_and_measure(
        tmp, COMPILED_WHOLE, batch_size=8, seq_len=512, activation_memory_budget=0.0
    )
    return full, zero


def test_a_compiled_step_under_an_activation_memory_budget_matches_the_gpu(
    budget_zero: tuple[list[int], list[int]],
):
    # the budget is set around the compile on the GPU (validate) as in the capture (estimate)
    full, (est_alloc, _, real_alloc, _) = budget_zero
    assert real_alloc < full[2]  # the GPU recomputed: the budget reached its compile
    assert abs(est_alloc - real_alloc) <= 0.01 * real_alloc


# first measured (H200, torch 2.11): the GPU reserved 3.90 GB where the estimate said 3.00 GB; since
# the estimate covers a first run that tunes Triton kernels without timing padded matmuls (and
# cuDNN attention's backward workspace), 3.89 GB. What the first run reserves depends on what
# its autotuning timed fastest: 3.90 GB on 2026-12-02, 3.73 GB on 2026-12-03 (the suite on six
# workers), so the estimate, the most-reserving of the first runs it traces, may be above
def test_a_compiled_step_under_an_activation_memory_budget_reserves_as_estimated(
    budget_zero: tuple[list[int], list[int]],
):
    _, (_, est_res, _, real_res) = budget_zero
    assert 0.97 * real_res <= est_res <= 1.06 * real_res
