"""memfit.plan for a model compiled as a whole with torch.compile: the search runs over
torch.compile's activation memory budget in place of checkpointing (each candidate captured as
inductor compiles it), and memfit.apply sets the budget for the process and takes it back.

A capture takes seconds even for the tiny GPT-2 here: the plan is made once per module, over
two budgets and one optimizer variant (four captures on two workers)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
from torch import nn

import memfit
from memfit import InvalidInputError
from memfit.planner import Plan
from memfit.runtime import apply, unapply

pytest.importorskip("triton", reason="inductor's lowering for CUDA needs triton")
transformers = pytest.importorskip("transformers")

CONFIG = dict(n_layer=2, n_embd=64, n_head=2, vocab_size=512, n_positions=64, use_cache=False)


def _eager() -> nn.Module:
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**CONFIG))
    model.loss_type = "ForCausalLM"
    return model


def _compiled() -> nn.Module:
    return torch.compile(_eager())  # type: ignore[return-value]


def _batch_of(n: int) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 512, (n, 32))
    return {"input_ids": ids, "labels": ids}


KW: dict[str, Any] = dict(precision="bf16-mixed", optimizer="adamw")


@pytest.fixture(scope="module")
def planned() -> Plan:
    return memfit.plan(
        _compiled,
        budget="2GiB",
        global_batch=2,
        batch_of=_batch_of,
        optimizers=("adamw",),
        memory_budgets=(1.0, 0.0),
        workers=2,
        **KW,
    )


def test_a_compiled_models_plan_searches_the_activation_memory_budget(planned: Plan):
    budgets = {e.candidate.memory_budget for e in planned.candidates}
    assert budgets == {1.0, 0.0}
    assert {e.candidate.checkpointing for e in planned.candidates} == {False}
    assert {e.candidate.precision for e in planned.candidates} == {"bf16-mixed"}  # the user's
    assert any("torch.compile's activation memory budget (1, 0)" in n for n in planned.notes)
    # the user's compile runs at the process's budget (1.0): not a change
    assert planned.baseline.candidate.memory_budget == 1.0
    at_one = [e for e in planned.candidates if e.candidate.memory_budget == 1.0]
    assert all(not any("memory budget" in c for c in e.changes) for e in at_one)
    assert any(
        "torch.compile activation memory budget 0" in c
        for e in planned.candidates
        for c in e.changes
    )


def test_a_candidates_memory_is_the_estimate_of_its_settings(planned: Plan):
    e = next(e for e in planned.candidates if e.candidate.memory_budget == 0.0)
    settings = e.candidate.settings()
    assert settings["activation_memory_budget"] == 0.0
    est = memfit.estimate(
        _compiled,
        batch_of=_batch_of,
        gpu="h200",
        batch_held=True,  # the plan counts the batch its step is given
        **{k: v for k, v in settings.items() if v is not None},
    )
    assert est.peak_allocated == e.peak_allocated
    # the compiled step's kernels are counted (their traffic), not only its matrix products
    assert e.step_seconds > 0


def test_apply_sets_the_budget_for_the_process_and_unapply_takes_it_back(planned: Plan):
    import torch._functorch.config as functorch_config

    chosen = dataclasses.replace(planned.chosen.candidate, memory_budget=0.25)  # type: ignore[union-attr]
    plan = dataclasses.replace(
        planned, chosen=dataclasses.replace(planned.chosen, candidate=chosen)
    )
    model = _compiled()
    optimizer = torch.optim.AdamW(model.parameters())
    step = apply(model, optimizer, plan)
    assert functorch_config.activation_memory_budget == 0.25
    assert any("activation memory budget 0.25" in c for c in step.changes)
    unapply(model, optimizer)
    assert functorch_config.activation_memory_budget == 1.0


def test_apply_refuses_a_budget_for_a_model_that_is_not_compiled(planned: Plan):
    import torch._functorch.config as functorch_config

    chosen = dataclasses.replace(planned.chosen.candidate, memory_budget=0.5)  # type: ignore[union-attr]
    plan = dataclasses.replace(
        planned, chosen=dataclasses.replace(planned.chosen, candidate=chosen)
    )
    model = _eager()
    with pytest.raises(InvalidInputError, match=r"not compiled as a whole.*nothing was changed"):
        apply(model, torch.optim.AdamW(model.parameters()), plan)
    assert functorch_config.activation_memory_budget == 1.0


def test_memory_budgets_for_an_eager_model_are_refused_before_any_trace():
    with pytest.raises(InvalidInputError, match=r"memory_budgets=\(0\.5,\) would be ignored"):
        memfit.plan(
            _eager, budget="2GiB", global_batch=2, batch_of=_batch_of, memory_budgets=(0.5,), **KW
        )


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"memory_budgets": (1.5,)}, "not a share between 0 and 1"),
        ({"memory_budgets": 0.5}, r"memory_budgets=0\.5 is not a list"),
        ({"checkpointing": (True,)}, "plans a compiled model's recomputation"),
    ],
)
def test_a_compiled_models_plan_refuses_settings_it_cannot_search(
    settings: dict[str, Any], message: str
):
    with pytest.raises(InvalidInputError, match=message):
        memfit.plan(_compiled, budget="2GiB", global_batch=2, batch_of=_batch_of, **settings, **KW)


def test_the_command_line_takes_memory_budgets_and_refuses_them_for_an_eager_model(
    capsys: pytest.CaptureFixture[str],
):
    from memfit.cli import main

    code = main(
        ["plan", "gpt2", "-b", "2", "-s", "64", "--gpu", "24GiB", "--memory-budgets", "1,0.5"]
    )
    err = capsys.readouterr().err
    assert code != 0 and "memory_budgets=(1.0, 0.5) would be ignored" in err
    assert "Traceback" not in err
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", "gpt2", "-b", "2", "--gpu", "24GiB", "--memory-budgets", "1,1.5"])
    assert exit_info.value.code == 2
    assert "--memory-budgets: 1.5 is not between 0 and 1" in capsys.readouterr().err
