"""Gradient accumulation in memfit's own step (``accumulation=N``): N micro-batches, each
forward and backward, their gradients added up, then one optimizer step; bad settings refused."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import memfit
from memfit import Category, InvalidInputError
from memfit._gpus import resolve_gpu
from memfit.cli import main
from memfit.trace import trace_workload
from memfit.workload import make_workload


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256))


def batch() -> torch.Tensor:
    return torch.randn(32, 256)


def _phases(trace: Any, step: int) -> list[str]:
    return [name for name, _ in trace.phases if name.startswith(f"step{step}.")]


def test_each_micro_batch_runs_forward_and_backward_before_one_optimizer_step() -> None:
    trace = trace_workload(make_workload(mlp, batch, accumulation=3), resolve_gpu("h200"))
    passes = ["step1.input", "step1.forward", "step1.backward"] * 3
    assert _phases(trace, 1) == [*passes, "step1.optimizer", "step1.zero_grad"]
    assert _phases(trace, 2) == [p.replace("1", "2") for p in _phases(trace, 1)]
    assert trace.copied_steps == 1, trace.traced_again
    # the gradients are made once a step (the first micro-batch), then added to in place
    grads = [
        e
        for e in trace.events
        if e.kind == "alloc" and trace.infos[e.info].category is Category.GRADIENT
    ]
    assert len(grads) == 2 * 4  # 2 steps x (2 weights + 2 biases)


def test_accumulation_holds_the_gradients_through_the_next_micro_batch() -> None:
    """The second micro-batch's forward runs with the first's gradients alive: with a model
    whose gradients are large beside its activations, the step peaks higher than one batch."""

    def wide() -> nn.Module:
        return nn.Sequential(nn.Linear(4096, 4096), nn.Linear(4096, 4096))

    def small() -> torch.Tensor:
        return torch.randn(4, 4096)

    one = memfit.estimate(wide, small, optimizer="sgd")
    four = memfit.estimate(wide, small, optimizer="sgd", accumulation=4)
    assert four.workload.accumulation == 4
    assert four.to_dict()["workload"]["accumulation"] == 4
    assert four.peak_allocated >= one.peak_allocated
    assert four.by_category[Category.GRADIENT] == one.by_category[Category.GRADIENT]


def test_a_users_accumulating_step_and_memfits_accumulation_agree() -> None:
    """memfit's accumulation is the loop a user writes (mean loss, backward per micro-batch)."""

    def step(model: nn.Module, b: torch.Tensor, optimizer: Any) -> None:
        for _ in range(2):
            loss = model(b).sum() / 2
            loss.backward()
            del loss
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    ours = memfit.estimate(mlp, batch, loss_fn=lambda m, b: m(b).sum(), accumulation=2)
    theirs = memfit.estimate(mlp, batch, step_fn=step)
    # theirs holds one batch for both micro-batches where ours makes one per micro-batch
    assert abs(ours.peak_allocated - theirs.peak_allocated) <= 32 * 256 * 4


def test_the_report_says_micro_batch_and_accumulation(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", "gpt2", "-b", "2", "-s", "64", "--accumulation", "4"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the header wraps at the terminal width
    assert "micro-batch 2 x 64 tokens" in out
    assert "4 micro-batches a step" in out


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "match"), [(0, "at least 1"), ("4", r"accumulation='4'")])
def test_accumulation_must_be_a_whole_number_of_at_least_one(value: object, match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        make_workload(mlp, batch, accumulation=value)


def test_accumulation_in_inference_is_refused() -> None:
    with pytest.raises(InvalidInputError, match=r"accumulation=4 with mode='infer'.*Drop"):
        make_workload(mlp, batch, mode="infer", accumulation=4)


def test_accumulation_beside_a_step_function_is_refused() -> None:
    def step(model: nn.Module, b: torch.Tensor, optimizer: Any) -> None:
        model(b).sum().backward()

    with pytest.raises(InvalidInputError, match=r"accumulation=2 and step_fn.*inside your step"):
        make_workload(mlp, batch, step_fn=step, accumulation=2)


def test_cli_refuses_accumulation_in_inference_before_any_work(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("memfit.cli._estimate_cmd.estimate", _never)
    argv = ["estimate", "gpt2", "-b", "1", "--mode", "infer", "--accumulation", "2"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "--accumulation 2 with --mode infer" in err and "Traceback" not in err


def test_cli_refuses_a_zero_accumulation(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["estimate", "gpt2", "-b", "1", "--accumulation", "0"])
    assert info.value.code == 2
    assert "0 is not accepted" in capsys.readouterr().err


def _never(*args: object, **kwargs: object) -> None:
    raise AssertionError("the work started before the flags were checked")
