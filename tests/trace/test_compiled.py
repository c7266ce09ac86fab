"""torch.compile'd models and steps: under ``compiled="eager"`` the estimate is the uncompiled
step's, exactly, with a note saying so; the user's objects are untouched; nothing is compiled and
torch's entry points are restored after the trace, whether it ends well or refused.

torch.compile is lazy: wrapping a module or function compiles nothing until it is called, and
nothing here calls a compiled object outside memfit's trace (where dynamo's entry runs eagerly).
The refusals themselves are the bad-input corpus's (tests/estimator/test_bad_input_compiled.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
from torch import nn

from memfit import Estimate, UnsupportedWorkloadError, estimate
from memfit.estimator._estimate import estimate_workload
from memfit.technique.compilation import COMPILED_NOTE, compiled_parts, eager_view
from memfit.workload import make_workload


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(32, 64)
        self.down = nn.Linear(64, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _x() -> torch.Tensor:
    return torch.randn(8, 32)


@pytest.fixture(scope="module")
def eager() -> Estimate:
    return estimate(Net(), _x)


def _same_as(est: Estimate, eager: Estimate) -> None:
    assert est.peak_allocated == eager.peak_allocated
    assert est.peak_reserved == eager.peak_reserved
    assert est.by_category == eager.by_category
    assert est.by_module == eager.by_module  # no "_orig_mod" in the names
    assert COMPILED_NOTE in est.notes and est.notes.count(COMPILED_NOTE) == 1
    assert COMPILED_NOTE not in eager.notes


@pytest.fixture(autouse=True)
def nothing_compiles() -> Any:
    """No test compiles anything: dynamo's counters stay empty, and torch's entry points are
    back after each test."""
    import torch._dynamo
    import torch._dynamo.eval_frame as eval_frame
    from torch._dynamo.utils import counters

    entry, compile_, optimize = (
        eval_frame._callback_from_stance,
        torch.compile,
        torch._dynamo.optimize,
    )
    before = {k: dict(v) for k, v in counters.items()}
    yield
    assert {k: dict(v) for k, v in counters.items()} == before
    assert torch.compile is compile_
    assert torch._dynamo.optimize is optimize
    assert eval_frame._callback_from_stance is entry


def test_a_compiled_model_is_estimated_as_its_eager_model_with_a_note(eager: Estimate):
    model = Net()
    compiled = torch.compile(model)
    _same_as(estimate(compiled, _x, compiled="eager"), eager)
    assert compiled._orig_mod is model  # the user's objects are untouched
    assert all(p.device.type == "cpu" for p in compiled.parameters())


def test_a_submodule_compiled_in_place_is_traced_eagerly_and_left_compiled(eager: Estimate):
    model = Net()
    model.blocks[1].compile()
    est = estimate(model, _x, compiled="eager")
    _same_as(est, eager)
    assert model.blocks[1]._compiled_call_impl is not None
    assert compiled_parts(model) == [
        "the submodule 'blocks.1' (Block) is compiled in place by .compile()"
    ]


def test_a_compiled_submodule_is_unwrapped_in_a_view_not_in_the_model(eager: Estimate):
    model = Net()
    model.blocks[0] = torch.compile(model.blocks[0])  # type: ignore[assignment]
    _same_as(estimate(model, _x, compiled="eager"), eager)
    assert type(model.blocks[0]).__name__ == "OptimizedModule"
    view = eager_view(model)
    assert compiled_parts(view) == [] and compiled_parts(model) != []
    assert view.blocks[0].up.weight is model.blocks[0]._orig_mod.up.weight  # shared, not copied


def test_a_factory_that_compiles_is_estimated_eagerly(eager: Estimate):
    def compiled_factory() -> nn.Module:
        return torch.compile(Net())  # type: ignore[return-value]

    def compiled_in_place() -> nn.Module:
        net = Net()
        net.compile()
        return net

    _same_as(estimate(compiled_factory, _x, compiled="eager"), eager)
    _same_as(estimate(compiled_in_place, _x, compiled="eager"), eager)


def test_a_factory_returning_a_model_compiled_before_is_unwrapped():
    with torch.device("meta"):
        plain = Net()
    ready = torch.compile(plain)
    est = estimate(lambda: ready, _x, compiled="eager")
    _same_as(est, estimate(lambda: plain, _x))
    assert ready._orig_mod is plain


def test_compile_inside_the_step_runs_the_function_eagerly():
    plain = make_workload(Net(), _x, mode="infer")

    def compiles(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
        return torch.compile(model, mode="reduce-overhead")(batch)  # type: ignore[no-any-return]

    helper = torch.compile(lambda t: t * 2)

    def calls_a_compiled_helper(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
        return helper(model(batch))  # type: ignore[no-any-return]

    def plain_helper(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
        return model(batch) * 2

    base = estimate_workload(dataclasses.replace(plain, forward_fn=lambda m, b: m(b)))
    est = estimate_workload(dataclasses.replace(plain, forward_fn=compiles, compiled="eager"))
    assert est.peak_allocated == base.peak_allocated and COMPILED_NOTE in est.notes
    base = estimate_workload(dataclasses.replace(plain, forward_fn=plain_helper))
    with_helper = dataclasses.replace(plain, forward_fn=calls_a_compiled_helper, compiled="eager")
    est = estimate_workload(with_helper)
    assert est.peak_allocated == base.peak_allocated and COMPILED_NOTE in est.notes


def test_a_compiled_step_fn_runs_eagerly():
    def step(model: nn.Module, batch: torch.Tensor, optimizer: Any) -> None:
        model(batch).sum().backward()
        optimizer.step()
        optimizer.zero_grad()

    def compiles_inside(model: nn.Module, batch: torch.Tensor, optimizer: Any) -> None:
        torch.compile(model)(batch).sum().backward()
        optimizer.step()
        optimizer.zero_grad()

    base = estimate(Net(), _x, step_fn=step)
    for fn in (torch.compile(step), compiles_inside):
        est = estimate(Net(), _x, step_fn=fn, compiled="eager")
        assert est.peak_allocated == base.peak_allocated
        assert est.by_category == base.by_category
        assert est.notes.count(COMPILED_NOTE) == 1


def test_a_compiled_loss_fn_runs_eagerly(eager: Estimate):
    loss = torch.compile(lambda model, batch: model(batch).sum())
    est = estimate(Net(), _x, loss_fn=loss, compiled="eager")
    assert est.peak_allocated == eager.peak_allocated
    assert est.notes.count(COMPILED_NOTE) == 1


def test_torch_is_restored_after_a_refusal_in_the_trace():
    def compiled_factory() -> nn.Module:
        return torch.compile(Net(), mode="max-autotune")  # type: ignore[return-value]

    with pytest.raises(UnsupportedWorkloadError):
        estimate(compiled_factory, _x)
    # the fixture checks torch.compile and dynamo's entry; an eager estimate still works
    assert estimate(Net(), _x).peak_allocated > 0
