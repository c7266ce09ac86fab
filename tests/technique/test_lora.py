"""LoRA through PEFT: the adapters are all that is trained, the estimate is the one of the same
model adapted by the user's own get_peft_model call, and bad ranks, targets that do not exist,
models PEFT has no defaults for and a missing PEFT are refused in one paragraph."""

from __future__ import annotations

import sys

import pytest
import torch
from tiny_llama import llama_factory, token_batch
from torch import nn

import memfit
from memfit import InvalidInputError, MissingExtraError
from memfit._events import Category

peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

llama = llama_factory(256, 688, 4, 2)
tokens = token_batch(2, 64)


def estimate(model: object = llama, **options: object) -> memfit.Estimate:
    settings: dict[str, object] = {"gpu": "h100", "precision": "bf16", **options}
    return memfit.estimate(model, tokens, **settings)  # type: ignore[arg-type]


def test_only_the_adapters_are_trained() -> None:
    full, adapted = estimate(), estimate(techniques={"lora": 8})
    assert adapted.peak_allocated < full.peak_allocated
    states = adapted.by_category.get(Category.OPTIMIZER_STATE, 0)
    adapters = sum(  # q_proj and v_proj of each layer: A (r x in) and B (out x r), in fp32
        8 * (256 + out) * 4
        for out in (256, 128)
        for _ in range(2)  # (PEFT's on a bf16 base)
    )
    assert 0 < states <= 2 * adapters + 4096  # AdamW's two states of the adapters alone
    assert any("LoRA rank 8" in n for n in adapted.notes)
    assert adapted.to_dict()["workload"]["techniques"] == {"lora": 8}


def test_a_rank_is_the_users_own_get_peft_model_with_the_defaults() -> None:
    def adapted_by_hand() -> nn.Module:
        config = peft.LoraConfig(r=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
        return peft.get_peft_model(llama(), config)

    # in mixed precision: no cast after the factory (which would cast the adapters too)
    ours = estimate(techniques={"lora": 8}, precision="bf16-mixed")
    theirs = estimate(adapted_by_hand, precision="bf16-mixed")
    assert (ours.peak_allocated, ours.peak_reserved) == (
        theirs.peak_allocated,
        theirs.peak_reserved,
    )


def test_a_peft_configuration_is_taken_as_it_is() -> None:
    config = peft.LoraConfig(r=4, target_modules=["gate_proj", "up_proj"], lora_dropout=0.1)
    e = estimate(techniques={"lora": config})
    assert e.peak_allocated > 0
    assert any("configuration given" in n for n in e.notes)


@pytest.mark.parametrize("rank", [0, -4, True, "16", 2.0])
def test_a_rank_that_is_not_a_whole_number_above_zero_is_refused(rank: object) -> None:
    with pytest.raises(InvalidInputError, match=f"lora={rank!r} is not a LoRA rank"):
        estimate(techniques={"lora": rank})


def test_target_modules_that_do_not_exist_are_refused_with_those_that_do() -> None:
    config = peft.LoraConfig(r=4, target_modules=["query_key_value"])
    with pytest.raises(InvalidInputError, match="target modules") as err:
        estimate(techniques={"lora": config})
    assert "q_proj" in str(err.value) and "LoraConfig(target_modules" in str(err.value)


def test_a_model_peft_has_no_defaults_for_needs_its_targets() -> None:
    def mlp() -> nn.Module:
        return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))

    with pytest.raises(InvalidInputError, match="needs target modules") as err:
        memfit.estimate(mlp, lambda: torch.randn(4, 64), gpu="h100", techniques={"lora": 8})
    assert "LoraConfig" in str(err.value)


def test_without_peft_the_install_command_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "peft", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'memfit\[lora\]'"):
        estimate(techniques={"lora": 8})


def test_a_users_own_step_trains_the_adapted_model() -> None:
    def step(model: nn.Module, batch: dict[str, torch.Tensor], optimizer: object) -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()  # type: ignore[attr-defined]
        optimizer.zero_grad(set_to_none=True)  # type: ignore[attr-defined]

    ours = estimate(techniques={"lora": 8}, precision="fp32", step_fn=step)
    loop = estimate(techniques={"lora": 8}, precision="bf16-mixed")
    assert ours.by_category.get(Category.OPTIMIZER_STATE, 0) == loop.by_category.get(
        Category.OPTIMIZER_STATE, 0
    )
    assert any("LoRA rank 8" in n for n in ours.notes)


def test_peft_config_is_the_lora_technique_by_another_name() -> None:
    config = peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"])
    by_alias = estimate(peft_config=config)
    by_name = estimate(techniques={"lora": config})
    assert (by_alias.peak_allocated, by_alias.peak_reserved) == (
        by_name.peak_allocated,
        by_name.peak_reserved,
    )
    assert any("configuration given" in n for n in by_alias.notes)


def test_lora_given_both_ways_is_refused() -> None:
    config = peft.LoraConfig(r=4, target_modules=["q_proj"])
    with pytest.raises(InvalidInputError, match="both say how to use lora"):
        estimate(peft_config=config, techniques={"lora": 8})
