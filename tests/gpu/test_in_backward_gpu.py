"""The optimizer variants on a real GPU: memfit.apply's step in backward gives the parameters the
fused AdamW stepping after backward gives, and the estimates of a step in backward and of 8-bit
states (bitsandbytes) match the allocator."""

from __future__ import annotations

import copy

import pytest
import torch

import memfit
from memfit.planner import Candidate, Evaluated, Plan, model_key

pytestmark = pytest.mark.gpu


def _gpt2() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=4,
        n_embd=256,
        n_head=4,
        bos_token_id=0,
        eos_token_id=0,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return GPT2LMHeadModel(config)


def _batch(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 50257, (4, 128), generator=g)
    return {"input_ids": ids.cuda(), "labels": ids.cuda()}


def test_in_backward_on_the_gpu_equals_the_fused_step_after_backward() -> None:
    model = _gpt2().cuda()
    reference = copy.deepcopy(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-3, fused=True)
    c = Candidate(4, 1, "bf16-mixed", False, "adamw-in-backward", "")
    e = Evaluated(c, 2**28, 2**29, 2**30, 0.05, 80.0, None, "gpu", True, ())
    step = memfit.apply(
        model, opt, Plan("gpt2", model_key(model), 2**34, 2**33, 0.05, 4, 128, e, [e], e)
    )
    for i in range(3):
        step(_batch(i))
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = reference(**_batch(i)).loss
        loss.backward()
        ref_opt.step()
        ref_opt.zero_grad(set_to_none=True)
    for (name, a), b in zip(model.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5, msg=name)
    memfit.unapply(model, opt)


@pytest.mark.parametrize("optimizer", ["adamw-in-backward", "adamw-8bit"])
def test_the_estimate_of_an_optimizer_variant_matches_the_allocator(optimizer: str) -> None:
    if optimizer.endswith("8bit"):
        pytest.importorskip("bitsandbytes")
    from transformers import GPT2Config, GPT2LMHeadModel

    def build() -> torch.nn.Module:
        config = GPT2Config(n_layer=6, n_embd=512, n_head=8, bos_token_id=0, eos_token_id=0)
        return GPT2LMHeadModel(config)

    def batch() -> dict[str, torch.Tensor]:
        ids = torch.randint(0, 50257, (2, 256))
        return {"input_ids": ids, "labels": ids}

    result = memfit.validate(build, batch, optimizer=optimizer, precision="bf16-mixed")
    print(result)
    est, real = result.estimate.peak_allocated, result.measured.peak_allocated
    assert abs(est - real) <= 0.01 * real
