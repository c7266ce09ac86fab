"""8-bit optimizer states (``optimizer='adamw-8bit'``, bitsandbytes): estimated from bitsandbytes'
own step, searched by the planner where only the states stand in the way, applied only to the
optimizer bitsandbytes builds, and a clear error without the package."""

from __future__ import annotations

import sys
from typing import Any

import pytest
import torch
from apply_models import gpt2 as tiny_gpt2
from torch import nn

import memfit
from memfit import InvalidInputError
from memfit._errors import MissingExtraError
from memfit._events import Category
from memfit.planner import Candidate, Evaluated, Plan, model_key, plan
from memfit.runtime import apply, unapply
from memfit.technique.eight_bit import eight_bit_available

bnb = pytest.importorskip("bitsandbytes")
transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

VOCAB = 8000


def gpt2() -> nn.Module:
    config = transformers.GPT2Config(
        n_layer=4, n_embd=512, n_head=4, vocab_size=VOCAB, bos_token_id=0, eos_token_id=0
    )
    return transformers.GPT2LMHeadModel(config)


def tokens(n: int) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, VOCAB, (n, 32))
    return {"input_ids": ids, "labels": ids}


def params() -> int:
    return sum(p.numel() for p in {id(p): p for p in gpt2().parameters()}.values())


def estimate(optimizer: str) -> Any:
    return memfit.estimate(gpt2, lambda: tokens(2), optimizer=optimizer, gpu="h200")


def test_eight_bit_states_take_a_byte_per_element_and_a_scale_per_256() -> None:
    states = estimate("adamw-8bit").by_category[Category.OPTIMIZER_STATE]
    n = params()
    # two uint8 states and a float32 scale per 256 of each, plus bitsandbytes' two 256-entry
    # quantization maps per parameter; parameters under 4096 elements keep float32 states
    assert 2 * n <= states <= 2 * n + 2 * n * 4 // 256 * 2 + 8 * 8 * 4096 * 2 + 2**20
    full = estimate("adamw-fused").by_category[Category.OPTIMIZER_STATE]
    assert states < full / 3.5


def test_without_bitsandbytes_the_error_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # import fails
    with pytest.raises(MissingExtraError, match=r"pip install 'memfit\[eightbit\]'"):
        estimate("adamw-8bit")


def test_the_planner_keeps_states_in_8_bits_where_only_they_stand_in_the_way() -> None:
    after, eight = estimate("adamw-fused"), estimate("adamw-8bit")
    need = [e.peak_reserved + e.non_pytorch for e in (after, eight)]
    assert need[1] < need[0]
    budget = int((need[0] + need[1]) / 2 / 0.95)
    p = plan(
        gpt2(),
        batch_of=tokens,
        budget=f"{budget // 2**20}MiB",
        global_batch=2,
        batch_size=2,
        precisions=("fp32",),
        checkpointing=(False,),
        workers=1,
    )
    assert p.chosen is not None and p.chosen.candidate.optimizer == "adamw-8bit"
    assert "optimizer adamw-8bit" in p.chosen.changes


def _plan_8bit(model: nn.Module) -> Plan:
    c = Candidate(4, 1, "fp32", False, "adamw-8bit", "")
    e = Evaluated(c, 2**20, 2**21, 2**22, 0.1, 80.0, None, "gpu", True, ())
    return Plan("test", model_key(model), 2**30, 2**29, 0.05, 4, 16, e, [e], e)


def test_apply_takes_bitsandbytes_optimizer_and_refuses_another() -> None:
    model = tiny_gpt2()
    with pytest.raises(InvalidInputError, match=r"Build bitsandbytes\.optim\.AdamW8bit"):
        apply(model, torch.optim.AdamW(model.parameters()), _plan_8bit(model))
    opt = bnb.optim.AdamW8bit(model.parameters(), lr=1e-3)
    step = apply(model, opt, _plan_8bit(model))
    ids = torch.randint(0, 128, (4, 16))
    before = [p.detach().clone() for p in model.parameters()]
    step({"input_ids": ids, "labels": ids})
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    unapply(model, opt)


def test_the_planner_finds_bitsandbytes_without_importing_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, "bitsandbytes", raising=False)
    assert eight_bit_available()
    assert "bitsandbytes" not in sys.modules  # its import loads torch's compiler: seconds
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)
    assert not eight_bit_available()


def _long_tokens(n: int) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, VOCAB, (n, 256))
    return {"input_ids": ids, "labels": ids}


def test_the_planner_checkpoints_fewer_blocks_with_8_bit_states_where_they_fit() -> None:
    """Where 8-bit states fit with every block checkpointed, fewer checkpointed blocks are
    searched with them too: at this budget fused AdamW fits no micro-batch of 4 (with full
    checkpointing it needs 1198 MiB), 8-bit states fit with full checkpointing (1124 MiB) and
    with three blocks of four (1164)."""
    p = plan(
        gpt2(),
        batch_of=_long_tokens,
        budget="1195MiB",
        margin=0.0,
        global_batch=4,
        batch_size=4,
        precisions=("fp32",),
        checkpointing=(False, True),
        workers=1,
    )
    partial = [
        e
        for e in p.candidates
        if e.candidate.optimizer == "adamw-8bit"
        and isinstance(e.candidate.checkpointing, float)
        and e.candidate.micro_batch == 4
    ]
    assert any(e.fits for e in partial), [e.candidate for e in p.candidates]
