"""The planner's search of the optimizer stepped in backward: tried at the whole global batch
where that does not fit with the optimizer stepping after backward but could without the
gradients held; never where it cannot help; bad requests refused."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import memfit
from memfit import InvalidInputError
from memfit.planner import Plan, plan

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

VOCAB = 8000


def gpt2() -> nn.Module:
    # the output layer not tied to the embedding: a tied one's two gradients are summed out of
    # place at the end of backward, the peak of this small model stepped in backward or not
    config = transformers.GPT2Config(
        n_layer=4,
        n_embd=512,
        n_head=4,
        vocab_size=VOCAB,
        bos_token_id=0,
        eos_token_id=0,
        tie_word_embeddings=False,
    )
    return transformers.GPT2LMHeadModel(config)


def tokens(n: int) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, VOCAB, (n, 32))
    return {"input_ids": ids, "labels": ids}


def needed(optimizer: str) -> int:
    e = memfit.estimate(gpt2, lambda: tokens(2), optimizer=optimizer, precision="bf16", gpu="h200")
    return e.peak_reserved + e.non_pytorch


def planned(budget_bytes: int, **options: Any) -> Plan:
    settings: dict[str, Any] = {
        "budget": f"{budget_bytes // 2**20}MiB",
        "global_batch": 2,
        "batch_size": 2,
        "precisions": ("bf16",),
        "checkpointing": (False,),
        "workers": 1,
        **options,
    }
    return plan(gpt2(), batch_of=tokens, **settings)


def _stepped_in_backward(p: Plan) -> list[Any]:
    return [e for e in p.candidates if e.candidate.optimizer.endswith("-in-backward")]


def test_in_backward_is_searched_where_only_the_gradients_stand_in_the_way() -> None:
    after, during = needed("adamw-fused"), needed("adamw-in-backward")
    assert during < after
    budget = int((after + during) / 2 / 0.95)  # the default margin keeps 5% free
    p = planned(budget)
    found = _stepped_in_backward(p)
    assert found and all(
        e.candidate.micro_batch == 2 and e.candidate.accumulation == 1 for e in found
    )
    assert any(e.fits for e in found)
    fused = [e for e in p.candidates if e.candidate.optimizer == "adamw-fused"]
    assert not any(e.fits for e in fused if e.candidate.accumulation == 1)
    assert "optimizer adamw-in-backward" in next(e for e in found if e.fits).changes


def test_not_searched_where_the_optimizer_after_backward_fits() -> None:
    p = planned(4 * 2**30)
    assert p.chosen is not None and p.chosen.candidate.accumulation == 1
    assert _stepped_in_backward(p) == []


def test_only_optimizers_stepped_in_backward_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="names only optimizers that cannot accumulate"):
        planned(4 * 2**30, optimizers=("adamw-in-backward",))


def test_a_users_optimizer_in_backward_with_accumulation_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="cannot accumulate: give batch_size=4"):
        plan(
            gpt2(),
            batch_of=tokens,
            budget="4GiB",
            global_batch=4,
            batch_size=2,
            optimizer="adamw-in-backward",
            workers=1,
        )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("adamw-fused,adamw-sideways", "'adamw-sideways' is not an optimizer memfit plans for"),
        ("adamw-in-backward", "names only optimizers that cannot accumulate"),
    ],
)
def test_the_command_line_refuses_optimizers_it_cannot_plan(
    value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from memfit.cli import main

    try:
        code = main(["plan", "gpt2", "-b", "8", "--gpu", "24GiB", "--optimizers", value])
    except SystemExit as exc:  # argparse's refusal of a value
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
