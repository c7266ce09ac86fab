"""The optimizers a plan searches: the family's plain ones bisected, and the variants each
``OptimizerVariant`` offers searched after them (``space["variants"]``), by their hooks."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from memfit import InvalidInputError
from memfit.planner._space import search_space
from memfit.planner._variant_search import accumulates, variants_of
from memfit.technique.eight_bit import _bnb
from memfit.workload import make_workload

transformers = pytest.importorskip("transformers")


def _gpt2() -> nn.Module:
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=500)
    return transformers.GPT2LMHeadModel(config)


def _batch() -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 500, (2, 16))
    return {"input_ids": ids, "labels": ids}


def _space(optimizers: tuple[str, ...] | None = None, **options: object) -> dict:
    base = make_workload(_gpt2, _batch, gpu="24GiB", **options)  # type: ignore[arg-type]
    return search_space(base, base.gpu, None, None, optimizers)


@pytest.fixture
def bitsandbytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_bnb, "eight_bit_available", lambda: True)


@pytest.mark.usefixtures("bitsandbytes")
def test_the_variants_each_offers_are_searched_after_the_plain_optimizers() -> None:
    space = _space()
    assert space["optimizers"] == ("adamw-fused", "adamw-foreach", "adamw-forloop")
    assert space["variants"] == ("adamw-in-backward", "adamw-8bit")
    assert [(v.name, n) for v, n in variants_of(space)] == [
        ("in_backward", "adamw-in-backward"),
        ("eight_bit", "adamw-8bit"),
    ]
    sgd = _space(optimizer="sgd")
    assert sgd["variants"] == ("sgd-in-backward",)  # no 8-bit states for SGD


@pytest.mark.usefixtures("bitsandbytes")
def test_no_eight_bit_states_for_fsdp2() -> None:
    # bitsandbytes cannot step FSDP2's DTensor shards
    assert _space(strategy="fsdp2", world_size=2)["variants"] == ("adamw-in-backward",)
    ddp = _space(strategy="ddp", world_size=2)
    assert ddp["variants"] == ("adamw-in-backward", "adamw-8bit")


def test_without_bitsandbytes_no_eight_bit_states(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_bnb, "eight_bit_available", lambda: False)
    assert _space()["variants"] == ("adamw-in-backward",)


def test_variants_that_accumulate_are_bisected_where_no_plain_optimizer_is_given() -> None:
    space = _space(("adamw-in-backward", "adamw-8bit"))
    assert space["optimizers"] == ("adamw-8bit",)
    assert space["variants"] == ("adamw-in-backward",)
    assert accumulates("adamw-8bit") and accumulates("adamw-fused")
    assert not accumulates("adamw-in-backward")


def test_the_first_name_of_each_variant_is_searched() -> None:
    space = _space(("adamw-fused", "adamw-8bit", "adam-8bit", "adamw-in-backward"))
    assert space["variants"] == ("adamw-8bit", "adam-8bit", "adamw-in-backward")
    assert [n for _, n in variants_of(space)] == ["adamw-in-backward", "adamw-8bit"]


def test_only_variants_that_cannot_accumulate_are_refused_with_one_that_can() -> None:
    with pytest.raises(InvalidInputError, match="the optimizer stepped in backward") as err:
        _space(("adamw-in-backward",))
    assert "optimizers=('adamw-fused', 'adamw-in-backward')" in str(err.value)
