"""memfit.apply with a plan that steps the optimizer in backward, on a real small model (CPU):
the same parameters as the optimizer stepping after backward, its state kept on the user's
optimizer, an LR scheduler followed, and everything taken back."""

from __future__ import annotations

import copy
import gc
import weakref
from typing import Any

import pytest
import torch
from apply_models import gpt2
from torch import nn

from memfit._errors import InvalidInputError
from memfit.planner import Candidate, Evaluated, Plan, model_key
from memfit.runtime import apply, unapply

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def batch(n: int = 4, seed: int = 1) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 128, (n, 16), generator=torch.Generator().manual_seed(seed))
    return {"input_ids": ids, "labels": ids}


def plan_for(model: nn.Module, optimizer: str = "adamw-in-backward", micro: int = 4) -> Plan:
    c = Candidate(micro, 1, "fp32", False, optimizer, "")
    e = Evaluated(c, 2**20, 2**21, 2**22, 0.1, 80.0, None, "gpu", True, ())
    return Plan("test", model_key(model), 2**30, 2**29, 0.05, micro, 16, e, [e], e)


def after_backward(model: nn.Module, steps: int, scheduled: bool = False) -> nn.Module:
    """The same training with the fused optimizer stepping after backward."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5) if scheduled else None
    for i in range(steps):
        model(**batch(seed=i)).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if sched is not None:
            sched.step()
    return model


def test_in_backward_steps_equal_the_optimizer_after_backward_and_its_state_is_the_users():
    model = gpt2()
    reference = after_backward(copy.deepcopy(model), steps=3, scheduled=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
    step = apply(model, opt, plan_for(model))
    assert any("stepped (fused) as backward completes it" in c for c in step.changes)
    for i in range(3):
        loss = step(batch(seed=i))
        assert loss.requires_grad is False
        assert all(p.grad is None for p in model.parameters())  # freed as they were used
        sched.step()
    for (name, a), b in zip(model.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6, msg=name)
    state = opt.state_dict()["state"]
    assert len(state) == len(list(model.parameters()))
    assert all(float(s["step"]) == 3 for s in state.values())
    unapply(model, opt)
    model(**batch()).loss.backward()  # the hooks are gone: gradients stay for the optimizer
    assert all(p.grad is not None for p in model.parameters())
    assert opt.param_groups[0].get("fused") in (None, False)  # the user's flags untouched


def test_in_backward_follows_a_reloaded_state_dict():
    model = gpt2()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    step = apply(model, opt, plan_for(model))
    step(batch(seed=0))
    saved = copy.deepcopy(opt.state_dict())
    opt.load_state_dict(saved)  # a resumed run: new state and group objects
    step(batch(seed=1))
    assert all(float(s["step"]) == 2 for s in opt.state_dict()["state"].values())
    unapply(model, opt)


def test_in_backward_refuses_a_batch_larger_than_planned():
    model = gpt2()
    opt = torch.optim.AdamW(model.parameters())
    step = apply(model, opt, plan_for(model, micro=4))
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(InvalidInputError, match=r"holds 8 samples.*cannot be split"):
        step(batch(8))
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    unapply(model, opt)


def test_apply_refuses_before_step_with_in_backward():
    model = gpt2()
    opt = torch.optim.AdamW(model.parameters())
    with pytest.raises(InvalidInputError, match="no moment when the gradients are complete"):
        apply(model, opt, plan_for(model), before_step=lambda: None)
    model(**batch()).loss.backward()  # nothing was changed: no hooks
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda ps: torch.optim.RMSprop(ps), "SGD, Adam and AdamW only"),
        (lambda ps: torch.optim.AdamW(ps, differentiable=True), "differentiable=True"),
    ],
)
def test_apply_refuses_optimizers_in_backward_cannot_run(make: Any, match: str):
    model = gpt2()
    opt = make(model.parameters())
    with pytest.raises(InvalidInputError, match=match):
        apply(model, opt, plan_for(model))
    model(**batch()).loss.backward()
    assert all(p.grad is not None for p in model.parameters())


def _applied_and_dropped(optimizer: str) -> tuple[Any, Any]:
    model = gpt2()
    opt = torch.optim.AdamW(model.parameters())
    step = apply(model, opt, plan_for(model, optimizer))
    step(batch())
    unapply(model, opt)
    return weakref.ref(model), weakref.ref(opt)


@pytest.mark.parametrize("optimizer", ["adamw-fused", "adamw-in-backward"])
def test_a_dropped_step_frees_its_model_without_the_garbage_collector(optimizer: str) -> None:
    _applied_and_dropped(optimizer)  # first calls may cache what they meet (warnings, kernels)
    gc.collect()
    gc.disable()
    try:
        model, opt = _applied_and_dropped(optimizer)
        assert model() is None and opt() is None  # the step held its guard, the guard the step
    finally:
        gc.enable()


def _applied_and_left(optimizer: str, checkpointing: bool | float, precision: str) -> Any:
    model = gpt2()
    opt = torch.optim.AdamW(model.parameters())
    c = Candidate(4, 1, precision, checkpointing, optimizer, "")
    e = Evaluated(c, 2**20, 2**21, 2**22, 0.1, 80.0, None, "gpu", True, ())
    step = apply(model, opt, Plan("test", model_key(model), 2**30, 2**29, 0.05, 4, 16, e, [e], e))
    step(batch())
    return weakref.ref(model)  # still applied: never unapplied


@pytest.mark.parametrize(
    ("optimizer", "checkpointing", "precision"),
    [
        ("adamw-in-backward", 0.5, "bf16"),  # memfit's blocks, a cast, hooks on the parameters
        ("adamw-fused", True, "fp32"),  # the model's own switch (transformers)
    ],
)
def test_a_model_dropped_while_applied_is_freed_without_the_garbage_collector(
    optimizer: str, checkpointing: bool | float, precision: str
) -> None:
    _applied_and_left(optimizer, checkpointing, precision)
    gc.collect()
    gc.disable()
    try:
        assert _applied_and_left(optimizer, checkpointing, precision)() is None
    finally:
        gc.enable()
