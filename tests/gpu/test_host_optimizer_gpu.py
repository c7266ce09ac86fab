"""The optimizer stepped on the host on a real GPU: the parameters it gives are the GPU's
own fused AdamW's, its states are host memory, and undoing it puts them back on the GPU."""

from __future__ import annotations

import copy

import pytest
import torch

from memfit.technique import GpuPlace, technique_named

pytestmark = pytest.mark.gpu


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)
    ).cuda()


def _step(model: torch.nn.Module, opt: torch.optim.Optimizer, i: int) -> None:
    g = torch.Generator().manual_seed(i)
    x = torch.randn(64, 256, generator=g).cuda()
    model(x).square().mean().backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def test_host_stepping_gives_the_gpu_step_and_keeps_no_state_on_the_gpu() -> None:
    model = _model()
    reference = copy.deepcopy(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-3, fused=True)
    undo = technique_named("host_optimizer").apply(True, model, opt, GpuPlace())
    for i in range(3):
        _step(model, opt, i)
        _step(reference, ref_opt, i)
    for (name, a), b in zip(model.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    states = [t for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    assert states and all(t.device.type == "cpu" for t in states)
    assert all(p.grad is None for p in model.parameters())  # freed at the step
    undo()
    assert [p for g in opt.param_groups for p in g["params"]] == list(model.parameters())
    _step(model, opt, 3)  # the optimizer steps on the GPU again, its states moved back
    _step(reference, ref_opt, 3)
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    states = [t for s in opt.state.values() for t in s.values() if t.dim() > 0]
    assert all(t.device.type == "cuda" for t in states)


def test_a_plan_with_the_optimizer_on_the_host_applies_and_unapplies() -> None:
    import memfit
    from memfit.planner import Candidate, Evaluated, Plan, model_key

    model = _model()
    reference = copy.deepcopy(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-3, fused=True)
    c = Candidate(64, 1, "fp32", False, "adamw-fused", "", techniques=(("host_optimizer", True),))
    e = Evaluated(c, 2**28, 2**29, 2**30, 0.05, 80.0, None, "gpu", True, ())
    plan = Plan("mlp", model_key(model), 2**34, 2**33, 0.05, 64, None, e, [e], e)
    step = memfit.apply(model, opt, plan, loss_fn=lambda m, x: m(x).square().mean())
    assert "optimizer on the host" in step.changes
    for i in range(2):
        x = torch.randn(64, 256, generator=torch.Generator().manual_seed(i)).cuda()
        step(x)
        reference(x).square().mean().backward()
        ref_opt.step()
        ref_opt.zero_grad(set_to_none=True)
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert all(t.device.type == "cpu" for s in opt.state.values() for t in s.values())
    memfit.unapply(model, opt)
    assert [p for g in opt.param_groups for p in g["params"]] == list(model.parameters())
