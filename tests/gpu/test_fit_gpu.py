"""memfit.fit inside a real training script: the model already on the GPU and one optimizer
step run (CUDA initialized, autograd's device threads started), then a plan with the default
workers, applied, and steps that run within the budget (a GPU of 3 GiB, the allocator held to
it from the process's start: the cache the script made before the plan counts too)."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import pytest
import torch

pytestmark = pytest.mark.gpu

SCRIPT = textwrap.dedent(
    """
    import json, math, time, torch, memfit
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=4, n_embd=256, n_head=4, n_positions=512, bos_token_id=0,
                        eos_token_id=0)
    budget = 3 * 2**30  # a 3 GiB GPU: the allocator held to it from the start
    torch.cuda.set_per_process_memory_fraction(budget / torch.cuda.mem_get_info()[1])
    model = GPT2LMHeadModel(config).cuda().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, config.vocab_size, (32, 512), device="cuda")
    batch = {"input_ids": ids, "labels": ids}
    small = {k: v[:4] for k, v in batch.items()}
    model(**small).loss.backward()  # the user's script has trained before it plans
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    began = time.perf_counter()
    step = memfit.fit(model, optimizer, budget="3GiB", batch=batch)  # default workers
    planned = time.perf_counter() - began
    torch.cuda.reset_peak_memory_stats()
    losses = [float(step(batch)) for _ in range(3)]
    torch.cuda.synchronize()
    print(json.dumps({"losses": losses, "planned_s": planned,
                      "reserved": torch.cuda.max_memory_reserved(), "budget": budget}))
    """
)


def test_fit_plans_and_applies_in_a_process_that_has_used_cuda() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-4000:]
    import json

    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(result)
    assert all(math.isfinite(loss) for loss in result["losses"])
    assert result["reserved"] <= result["budget"]
    assert torch.cuda.is_available()
