"""On a real GPU: mixture-of-experts estimates match what it measures, for the experts
implementation transformers picks by default (grouped_mm) and for eager experts with the
router's choices forced to the policy the estimate assumed (balanced, loaded or skewed)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

_CODE = """
import json, torch, transformers
from memfit.estimator._estimate import estimate_workload
from memfit.estimator._measure import measure
from memfit.trace._routing import Routing
from memfit.workload import make_workload
from transformers.models.mixtral import modeling_mixtral

IMPL, POLICY = {impl!r}, {policy!r}

def build():
    cfg = transformers.MixtralConfig(vocab_size=8000, hidden_size=512, intermediate_size=1792,
        num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
        num_local_experts=8, num_experts_per_tok=2)
    if IMPL is not None:
        cfg._experts_implementation = IMPL
    return transformers.MixtralForCausalLM(cfg)

ids = torch.randint(0, 8000, (4, 512))
w = make_workload(build, {{"input_ids": ids, "labels": ids}}, precision="bf16-mixed",
    gpu="h200", moe_routing=POLICY)
e = estimate_workload(w)
forward = modeling_mixtral.MixtralTopKRouter.forward

def forced(self, hidden_states):  # the GPU routes as the estimate assumed
    logits, scores, idx = forward(self, hidden_states)
    choice = Routing(POLICY).choices(idx.shape[0], self.num_experts, self.top_k)
    return logits, scores, choice.to(idx.device)

modeling_mixtral.MixtralTopKRouter.forward = forced
m, _ = measure(w)
print(json.dumps([e.peak_allocated, e.peak_reserved, m.peak_allocated, m.peak_reserved]))
"""


@pytest.mark.parametrize(
    ("impl", "policy"),
    [(None, "balanced"), ("eager", "balanced"), ("eager", "loaded"), ("eager", "skewed")],
)
def test_moe_estimate_matches_the_gpu(impl: str | None, policy: str):
    code = _CODE.format(impl=impl, policy=policy)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    est_alloc, est_res, real_alloc, real_res = json.loads(out.stdout.strip().splitlines()[-1])
    print(
        f"{impl} {policy}: estimated {est_alloc:,} / {est_res:,}, "
        f"real {real_alloc:,} / {real_res:,}"
    )
    assert abs(est_alloc - real_alloc) <= 0.01 * real_alloc
    assert abs(est_res - real_res) <= 0.02 * real_res
