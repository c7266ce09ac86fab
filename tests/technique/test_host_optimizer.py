"""The optimizer stepped on the host: what the estimate keeps off the GPU and counts on the host,
the same steps as the optimizer on its own (on the CPU, a host of plain CPU tensors), undone
cleanly, and the settings it cannot go with refused."""

from __future__ import annotations

import copy
from contextlib import nullcontext
from typing import Any

import pytest
import torch
from torch import nn

import memfit
from memfit import InvalidInputError
from memfit.technique import technique_named
from memfit.technique.host_optimizer._stepping import HostStepping

ON_HOST = {"host_optimizer": True}


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 1024))


def batch() -> torch.Tensor:
    return torch.randn(64, 1024)


class CpuHost:
    """A host of plain CPU tensors, the model's too: the mechanics without a GPU."""

    def host_empty_like(self, t: torch.Tensor) -> torch.Tensor:
        return torch.empty(t.shape, dtype=t.dtype)

    def on_host(self) -> Any:
        return nullcontext()

    def synchronize(self) -> None:
        pass


def pinned(nbytes: int) -> int:
    return 1 << (nbytes - 1).bit_length()


def test_the_states_and_the_step_leave_the_gpu_for_the_host() -> None:
    plain = memfit.estimate(mlp, batch, gpu="h100", precision="fp32")
    hosted = memfit.estimate(mlp, batch, gpu="h100", precision="fp32", techniques=ON_HOST)
    sizes = [p.numel() * 4 for p in mlp().parameters()]
    states = 2 * sum(sizes)  # AdamW's two, fp32
    # at least the states leave the GPU (and the foreach step's temporaries with them)
    assert plain.peak_allocated - hosted.peak_allocated >= states
    # on the host: a pinned copy of each parameter and of its gradient, the states, the steps
    steps = 4 * len(sizes)  # each state's step count, a 0-d fp32 tensor
    assert hosted.host_memory == 2 * sum(pinned(n) for n in sizes) + states + steps
    assert plain.host_memory == 0
    assert any("host_optimizer" in n for n in hosted.notes)


def test_mixed_precision_and_accumulation_estimate_with_it() -> None:
    e = memfit.estimate(
        mlp, batch, gpu="h100", precision="bf16-mixed", accumulation=2, techniques=ON_HOST
    )
    assert e.host_memory > 0 and e.peak_allocated > 0


def test_host_stepping_steps_as_the_optimizer_does_and_undoes_cleanly() -> None:
    model, reference = mlp(), mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    params = list(model.parameters())
    stepping = HostStepping(opt, CpuHost())
    for i in range(3):
        x = torch.randn(8, 1024, generator=torch.Generator().manual_seed(i))
        for m, o in ((model, opt), (reference, ref_opt)):
            m(x).square().mean().backward()
            o.step()
            o.zero_grad(set_to_none=True)
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    assert all(p.grad is None for p in params)
    assert all(p not in opt.state for p in params)  # keyed by the host copies
    stepping.undo()
    assert opt.param_groups[0]["params"] == params
    assert set(opt.state) == set(params)
    assert not hasattr(opt, "_memfit_host_stepping")
    assert "step" not in vars(opt)  # the class's own step again


def test_states_a_step_made_before_move_with_it() -> None:
    model = mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(batch()).sum().backward()
    opt.step()
    before = {id(p): copy.deepcopy(opt.state[p]) for p in model.parameters()}
    stepping = HostStepping(opt, CpuHost())
    hosts = [h for _, h in stepping.pairs]
    assert set(opt.state) == set(hosts)
    stepping.undo()
    for p in model.parameters():
        torch.testing.assert_close(opt.state[p]["exp_avg"], before[id(p)]["exp_avg"])


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"mode": "infer"}, "mode='infer'"),
        ({"optimizer": "adamw-in-backward"}, "adamw-in-backward"),
        ({"optimizer": "adamw-8bit"}, "adamw-8bit"),
        ({"precision": "fp16-mixed"}, "fp16-mixed"),
    ],
)
def test_what_it_cannot_go_with_is_refused(settings: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidInputError, match="host_optimizer=True") as err:
        memfit.estimate(mlp, batch, gpu="h100", techniques=ON_HOST, **settings)
    assert named in str(err.value)


def test_a_data_parallel_rank_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="strategy='ddp'"):
        memfit.estimate(mlp, batch, gpu="h100", strategy="ddp", world_size=2, techniques=ON_HOST)


def test_its_value_is_a_bool() -> None:
    with pytest.raises(InvalidInputError, match="host_optimizer='yes' is not True or False"):
        memfit.estimate(mlp, batch, gpu="h100", techniques={"host_optimizer": "yes"})


def test_the_planner_times_its_copies_and_its_host_step() -> None:
    from memfit.technique import StepFacts

    technique = technique_named("host_optimizer")
    facts = StepFacts(10**9, 4, lambda direction, nbytes: nbytes / 50e9)
    seconds = technique.step_seconds(True, facts)
    assert seconds > 2 * 4e9 / 50e9  # two copies of the parameters, and the host's step
    assert technique.step_seconds(False, facts) == 0.0
