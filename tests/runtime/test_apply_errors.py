"""Bad input to memfit.apply, unapply, fit and model_key: an InvalidInputError that names the
value and the fix, and nothing changed (the model's state_dict, the optimizer's param groups)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
from torch import nn

import memfit
from memfit import InvalidInputError
from memfit.planner import Candidate, Evaluated, Plan, model_key
from memfit.runtime import AutoMicrobatch, apply, fit, unapply

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


class Net(nn.Module):
    """Two repeated blocks (something to checkpoint) and a buffer."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(width) for _ in range(2))
        self.register_buffer("scale", torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x * self.scale


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def loss_fn(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    return model(batch).pow(2).mean()


def make_plan(model: nn.Module, *, fits: bool = True, **settings: Any) -> Plan:
    values = {
        "micro_batch": 2,
        "accumulation": 2,
        "precision": "bf16",
        "checkpointing": True,
        "optimizer": "adamw-fused",
        "allocator_config": "",
        **settings,
    }
    c = Candidate(**values)
    e = Evaluated(c, 2**30, 2**31, 3 * 2**30, 0.1, 40.0, None, "gpu", fits, ())
    return Plan(
        "Net",
        model_key(model),
        2**31,
        int(0.95 * 2**31),
        0.05,
        4,
        None,
        e if fits else None,
        [e],
        e,
        smallest=None if fits else e,
        shortfall=0 if fits else 2**30 + 2**29,
        would_fit=[] if fits else ["shorter sequences (seq_len 512)"],
    )


def snapshot(model: nn.Module, opt: torch.optim.Optimizer) -> tuple[Any, ...]:
    sd = {k: (v.dtype, v.clone()) for k, v in model.state_dict().items()}
    groups = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
    forwards = [m for m in model.modules() if "forward" in m.__dict__]
    return sd, groups, forwards, dict(opt.__dict__).get("_step_supports_amp_scaling")


def assert_unchanged(model: nn.Module, opt: torch.optim.Optimizer, before: tuple[Any, ...]):
    sd, groups, forwards, amp = snapshot(model, opt)
    assert sd.keys() == before[0].keys()
    for k, (dtype, value) in before[0].items():
        assert sd[k][0] == dtype and torch.equal(sd[k][1], value)
    assert groups == before[1] and forwards == before[2] and amp == before[3]
    assert "_memfit_applied" not in model.__dict__


def parts() -> tuple[Net, torch.optim.Optimizer]:
    model = Net()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


# -- apply refuses, before anything changes -----------------------------------------------------


def test_apply_refuses_a_model_the_plan_was_not_made_for():
    model, opt = parts()
    plan = make_plan(Net(width=16))
    before = snapshot(model, opt)
    with pytest.raises(
        InvalidInputError,
        match=r"made for Net/544/4 \(Net\), but the model given is Net/144/4.*"
        r"memfit\.plan\(model, batch, budget=\.\.\.\)",
    ):
        apply(model, opt, plan, loss_fn=loss_fn)
    assert_unchanged(model, opt, before)


def test_apply_refuses_a_plan_that_found_nothing_that_fits():
    model, opt = parts()
    before = snapshot(model, opt)
    with pytest.raises(
        InvalidInputError,
        match=r"nothing that fits 2\.00 GiB.*smallest configuration \(micro-batch 2 x 2.*"
        r"1\.50 GiB over \(plan\.smallest, plan\.shortfall\).*Plan again with shorter sequences",
    ):
        apply(model, opt, make_plan(model, fits=False), loss_fn=loss_fn)
    assert_unchanged(model, opt, before)


def test_apply_refuses_an_optimizer_of_another_model():
    model, _ = parts()
    opt = torch.optim.AdamW(Net().parameters(), lr=1e-3)
    before = snapshot(model, opt)
    with pytest.raises(
        InvalidInputError, match=r"4 of 4 parameters that are not Net's.*model\.parameters"
    ):
        apply(model, opt, make_plan(model), loss_fn=loss_fn)
    assert_unchanged(model, opt, before)


def test_apply_refuses_an_optimizer_of_another_kind_than_planned():
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = snapshot(model, opt)
    with pytest.raises(InvalidInputError, match=r"'adamw-fused'.*SGD.*optimizer='sgd'"):
        apply(model, opt, make_plan(model), loss_fn=loss_fn)
    assert_unchanged(model, opt, before)


def test_apply_refuses_fused_for_a_differentiable_optimizer():
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, differentiable=True)
    before = snapshot(model, opt)
    with pytest.raises(InvalidInputError, match=r"adamw-fused.*differentiable=True"):
        apply(model, opt, make_plan(model), loss_fn=loss_fn)
    assert_unchanged(model, opt, before)


def test_apply_refuses_checkpointing_of_a_model_without_repeated_blocks():
    model = nn.Linear(4, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    before = snapshot(model, opt)
    with pytest.raises(
        InvalidInputError, match=r"no repeated blocks in Linear.*torch\.utils\.checkpoint"
    ):
        apply(model, opt, make_plan(model, checkpointing="selective"), loss_fn=loss_fn)
    assert_unchanged(model, opt, before)


def test_apply_refuses_selective_on_a_model_whose_own_checkpointing_is_on():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64)
    model = transformers.GPT2LMHeadModel(config)
    model.gradient_checkpointing_enable()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with pytest.raises(InvalidInputError, match=r"selective.*own gradient checkpointing.*disable"):
        apply(model, opt, make_plan(model, checkpointing="selective", precision="fp32"))
    assert "_memfit_applied" not in model.__dict__


def test_apply_refuses_an_allocator_text_torch_would_not_take():
    model, opt = parts()
    before = snapshot(model, opt)
    with pytest.raises(InvalidInputError, match=r"'bogus:1': unknown key 'bogus'"):
        apply(model, opt, make_plan(model, allocator_config="bogus:1"), loss_fn=loss_fn)
    assert_unchanged(model, opt, before)


def test_apply_takes_back_what_it_made_when_a_later_change_fails(monkeypatch: pytest.MonkeyPatch):
    from memfit.runtime import _changes

    def broken(self: Any) -> None:
        raise InvalidInputError("flags refused")

    monkeypatch.setattr(_changes.OptimizerFlags, "do", broken)
    model, opt = parts()
    before = snapshot(model, opt)
    with pytest.raises(InvalidInputError, match="flags refused"):
        apply(model, opt, make_plan(model), loss_fn=loss_fn)
    assert_unchanged(model, opt, before)


def test_apply_refuses_a_second_plan_on_top_of_one():
    model, opt = parts()
    apply(model, opt, make_plan(model), loss_fn=loss_fn)
    with pytest.raises(
        InvalidInputError, match=r"already applied.*memfit\.unapply\(model, optimizer\)"
    ):
        apply(model, opt, make_plan(model), loss_fn=loss_fn)


@pytest.mark.parametrize(
    ("setting", "value", "match"),
    [
        ("precision", "int8", r"precision 'int8' is not one of fp32"),
        ("checkpointing", "some", r"checkpointing 'some' is not False, True, 'selective' or"),
        ("checkpointing", 1.5, r"checkpointing 1\.5 is not False, True, 'selective' or a"),
        ("micro_batch", 0, r"micro_batch=0 is not a whole number >= 1"),
        ("accumulation", 1.5, r"accumulation=1\.5 is not a whole number >= 1"),
    ],
)
def test_apply_refuses_a_damaged_plan(setting: str, value: Any, match: str):
    model, opt = parts()
    plan = make_plan(model)
    assert plan.chosen is not None
    bad = dataclasses.replace(plan.chosen.candidate, **{setting: value})
    plan = dataclasses.replace(plan, chosen=dataclasses.replace(plan.chosen, candidate=bad))
    before = snapshot(model, opt)
    with pytest.raises(InvalidInputError, match=match + r".*memfit\.plan"):
        apply(model, opt, plan, loss_fn=loss_fn)
    assert_unchanged(model, opt, before)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (("model", "opt", "plan"), r"needs a torch\.nn\.Module as model, not 'model'"),
        (("MODEL", "adamw", "plan"), r"optimizer='adamw'.*is not a torch\.optim\.Optimizer"),
        (("MODEL", "OPT", {"chosen": None}), r"plan=dict is not a memfit Plan.*memfit\.plan"),
    ],
)
def test_apply_refuses_wrong_argument_types(args: tuple[Any, ...], match: str):
    model, opt = parts()
    values = {"MODEL": model, "OPT": opt}
    given = [values.get(a, a) if isinstance(a, str) else a for a in args]
    with pytest.raises(InvalidInputError, match=match):
        apply(*given)


def test_apply_refuses_a_loss_fn_that_is_not_callable():
    model, opt = parts()
    with pytest.raises(
        InvalidInputError, match=r"loss_fn=.*is not callable.*loss_fn\(model, batch\)"
    ):
        apply(model, opt, make_plan(model), loss_fn="mse")  # type: ignore[arg-type]


# -- unapply and the step after it ---------------------------------------------------------------


def test_unapply_of_a_model_never_applied():
    model, opt = parts()
    with pytest.raises(InvalidInputError, match=r"No plan is applied to this Net.*memfit\.apply"):
        unapply(model, opt)


def test_unapply_refuses_another_optimizer():
    model, opt = parts()
    apply(model, opt, make_plan(model), loss_fn=loss_fn)
    other = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with pytest.raises(InvalidInputError, match=r"not the optimizer the plan was applied with"):
        unapply(model, other)
    unapply(model, opt)


def test_unapply_refuses_what_is_not_a_model():
    with pytest.raises(InvalidInputError, match=r"needs the torch\.nn\.Module.*not str"):
        unapply("model", None)  # type: ignore[arg-type]


def test_a_step_after_unapply_is_refused():
    model, opt = parts()
    step = apply(model, opt, make_plan(model), loss_fn=loss_fn)
    unapply(model, opt)
    with pytest.raises(InvalidInputError, match=r"no longer applied.*memfit\.apply\(model"):
        step(torch.randn(4, 8))


# -- fit, model_key, AutoMicrobatch's starting split ---------------------------------------------


def test_fit_needs_an_example_batch():
    model, opt = parts()
    with pytest.raises(
        InvalidInputError, match=r"needs an example batch.*batch=next\(iter\(loader\)\)"
    ):
        fit(model, opt, loss_fn, budget="24GiB", batch=None)


def test_fit_refuses_a_batch_without_a_batch_dimension():
    model, opt = parts()
    with pytest.raises(InvalidInputError, match=r"no tensor with a batch dimension"):
        fit(model, opt, loss_fn, budget="24GiB", batch=torch.tensor(3.0))


def test_fit_passes_the_planners_refusal_of_a_budget(monkeypatch: pytest.MonkeyPatch):
    model, opt = parts()
    with pytest.raises(InvalidInputError, match=r"GPU size '24' has no unit.*'24GiB'"):
        fit(model, opt, loss_fn, budget="24", batch=torch.randn(4, 8), gpu="h100")


def test_fit_takes_gpu_alone_and_refuses_neither(monkeypatch: pytest.MonkeyPatch):
    model, opt = parts()
    with pytest.raises(InvalidInputError, match=r"needs the GPU memory to fit.*gpu='24GiB'"):
        fit(model, opt, loss_fn, batch=torch.randn(4, 8))
    budgets: list[Any] = []

    def fake_plan(m: nn.Module, **kwargs: Any) -> Plan:
        budgets.append(kwargs["budget"])
        return make_plan(m, fits=False)

    monkeypatch.setattr(memfit.planner, "plan", fake_plan)
    with pytest.raises(InvalidInputError, match=r"nothing that fits"):
        fit(model, opt, loss_fn, gpu="h100", batch=torch.randn(4, 8))
    assert budgets == [memfit.resolve_gpu("h100")]


def test_fit_refuses_when_nothing_fits(monkeypatch: pytest.MonkeyPatch):
    model, opt = parts()
    monkeypatch.setattr(memfit.planner, "plan", lambda m, **kw: make_plan(m, fits=False))
    before = snapshot(model, opt)
    with pytest.raises(InvalidInputError, match=r"nothing that fits.*plan\.shortfall"):
        fit(model, opt, loss_fn, budget="2GiB", batch=torch.randn(4, 8))
    assert_unchanged(model, opt, before)


def test_batch_of_refuses_a_size_below_one():
    from memfit.runtime._fit import batch_maker

    with pytest.raises(InvalidInputError, match=r"batch_of\(0\).*whole number >= 1"):
        batch_maker(torch.randn(4, 8))(0)


def test_model_key_needs_a_module():
    with pytest.raises(InvalidInputError, match=r"model_key needs a torch\.nn\.Module, not str"):
        model_key("gpt2")  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0, -2, 1.5, True])
def test_automicrobatch_refuses_a_bad_starting_microbatch_size(value: Any):
    model, opt = parts()
    with pytest.raises(
        InvalidInputError, match=rf"microbatch_size={value!r} is not accepted.*>= 1"
    ):
        AutoMicrobatch(model, opt, loss_fn, microbatch_size=value)
