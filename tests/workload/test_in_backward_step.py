"""The optimizer stepped in backward (``optimizer='adamw-in-backward'``): estimated with each
gradient freed after its parameter's fused update, its state and ops the optimizer's, and the
settings it cannot run with refused in Python and on the command line."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch import nn

import memfit
from memfit import InvalidInputError
from memfit._events import Category
from memfit._gpus import resolve_gpu
from memfit.cli import main
from memfit.technique.in_backward import OptimizerInBackward
from memfit.trace import trace_workload
from memfit.workload import make_workload

pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def _gpt2() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(
        GPT2Config(
            n_layer=4,
            n_embd=256,
            n_head=4,
            vocab_size=8000,
            n_positions=64,
            bos_token_id=0,
            eos_token_id=0,
        )
    )


def _batch() -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 8000, (1, 64))
    return {"input_ids": ids, "labels": ids}


def _params() -> int:
    return sum(p.numel() for p in {id(p): p for p in _gpt2().parameters()}.values())


def test_stepped_in_backward_the_gradients_leave_the_peak_and_the_state_stays() -> None:
    after = memfit.estimate(_gpt2, _batch, optimizer="adamw-fused", gpu="h200")
    during = memfit.estimate(_gpt2, _batch, optimizer="adamw-in-backward", gpu="h200")
    grads = 4 * _params()
    # a small batch: the step peaks with every gradient held, or with none of them
    assert after.by_category[Category.GRADIENT] == grads
    # at its peak only the tied embedding's gradient is held: the head's and the embedding's
    # are summed out of place at the end of backward, as torch does; every other gradient
    # left with its parameter's update
    assert during.by_category.get(Category.GRADIENT, 0) <= 4 * 8000 * 256 < grads // 2
    state = during.by_category[Category.OPTIMIZER_STATE]
    assert state == after.by_category[Category.OPTIMIZER_STATE] >= 2 * grads  # exp_avg, _sq
    # less by the gradients backward has not reached, not all of them: the tied embedding's
    # gradient is made by the head, first, and complete only at the embedding, last
    assert after.peak_allocated - during.peak_allocated > grads // 3
    assert any("stepped each parameter in backward" in n for n in during.notes)
    assert during.workload.optimizer == "adamw-in-backward"


def test_each_parameter_gets_one_fused_update_in_the_optimizer_phase() -> None:
    workload = make_workload(_gpt2, _batch, optimizer="adamw-in-backward", gpu="h200")
    trace = trace_workload(workload, resolve_gpu("h200"), costs=True)
    assert trace.costs is not None
    tensors = len({id(p) for p in _gpt2().parameters()})
    ops = trace.costs.phases["step2.optimizer"].ops
    kinds = Counter(kind for kind, _, _ in ops)
    assert kinds["mem"] >= tensors  # one fused update (traffic) per parameter tensor
    assert trace.costs.parameter_tensors == tensors
    states = [
        trace.infos[e.info]
        for e in trace.events
        if e.kind == "alloc"
        and e.info is not None
        and trace.infos[e.info].category is Category.OPTIMIZER_STATE
    ]
    assert states and all(info.phase == "step1.optimizer" for info in states)


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"accumulation": 2}, "cannot add up over accumulation=2"),
        ({"precision": "fp16-mixed"}, "GradScaler must unscale"),
        ({"step_fn": lambda model, batch, opt: None}, "a step function of your own"),
    ],
)
def test_settings_it_cannot_run_with_are_refused(settings: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        memfit.estimate(_gpt2, _batch, optimizer="adamw-in-backward", **settings)  # type: ignore[arg-type]


def test_the_command_line_refuses_accumulation(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["estimate", "gpt2", "-b", "1", "-o", "adamw-in-backward", "--accumulation", "4"])
    err = capsys.readouterr().err
    assert code != 0 and "accumulation=4" in err and "Traceback" not in err


def test_users_hooks_and_a_schedulers_patched_step_are_not_run_per_parameter() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.optim.lr_scheduler.StepLR(opt, 1)  # wraps opt.step on the instance
    calls: list[int] = []
    opt.register_step_post_hook(lambda *args: calls.append(1))
    stepper = OptimizerInBackward(opt)
    before = [p.detach().clone() for p in model.parameters()]
    model(torch.ones(2, 4)).sum().backward()
    assert stepper.stepped == 4 and calls == []
    moved = [not torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True)]
    assert all(moved) and all(p.grad is None for p in model.parameters())
    stepper.remove()
    model(torch.ones(2, 4)).sum().backward()
    assert stepper.stepped == 4 and all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("optimizer", ["sgd-fused", "sgd-in-backward"])
def test_sgds_fused_step_which_has_no_meta_kernel_is_traced(optimizer: str) -> None:
    est = memfit.estimate(_gpt2, _batch, optimizer=optimizer, gpu="h200")
    momentum = est.by_category[Category.OPTIMIZER_STATE]
    assert momentum == 4 * _params()  # one momentum buffer per parameter, made in Python
