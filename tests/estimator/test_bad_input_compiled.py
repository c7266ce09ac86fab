"""Bad input: models and steps compiled with torch.compile in forms memfit does not estimate
compiled (a whole model compiled with inductor's defaults is: tests/trace/test_compiled_step.py).
Each form is refused (``UnsupportedWorkloadError``), in one paragraph that names what is compiled
and the way forward (``compiled='eager'``, the uncompiled step); ``compiled=`` given where
nothing is compiled, or with an unknown value, is refused as it would be ignored.

What the user gives is refused before any work (the trace fails the test if reached); what is
compiled while the step runs is refused in the trace. Models are two small layers; torch.compile
only wraps (it is lazy) and nothing here calls a compiled object outside memfit's trace.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import memfit
from memfit import InvalidInputError, MemfitError, UnsupportedWorkloadError, estimate
from memfit.cli import main
from memfit.estimator._estimate import estimate_workload
from memfit.workload import make_workload

FIX = r"compiled='eager' \(on the command line: --compiled eager\)"


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.proj(x))


def _x() -> torch.Tensor:
    return torch.randn(4, 8)


@pytest.fixture
def no_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    """The trace fails the test if reached: the check must come before any work."""

    def reached(*args: object, **kwargs: object) -> None:
        raise AssertionError("the trace started before the compiled model was refused")

    monkeypatch.setattr("memfit.estimator._estimate.trace_workload", reached)


# -- what the user gives, refused before the trace ------------------------------------------


def test_a_model_compiled_in_a_mode_not_taken_is_refused_naming_it_and_the_fix(no_trace: None):
    # a model compiled as a whole with inductor's defaults is estimated compiled
    # (tests/trace/test_compiled_step.py); other modes and backends are refused
    with pytest.raises(UnsupportedWorkloadError, match=r"the model is torch\.compile\(Net\)"):
        estimate(torch.compile(Net(), mode="max-autotune"), _x)
    with pytest.raises(UnsupportedWorkloadError, match=FIX):
        estimate(torch.compile(Net(), backend="eager"), _x)


def test_the_refusal_says_what_is_taken_and_why_it_matters(no_trace: None):
    with pytest.raises(MemfitError, match=r"saves other \(usually fewer\) activations"):
        estimate(torch.compile(Net(), mode="reduce-overhead"), _x)
    with pytest.raises(MemfitError, match=r"compiled as a whole by torch\.compile with inductor's"):
        estimate(torch.compile(Net(), mode="reduce-overhead"), _x)


def test_a_submodule_compiled_in_place_is_refused_by_name(no_trace: None):
    model = Net()
    model.proj.compile()
    with pytest.raises(
        UnsupportedWorkloadError,
        match=r"the submodule 'proj' \(Linear\) is compiled in place by \.compile\(\)\. .*" + FIX,
    ):
        estimate(model, _x)


def test_a_compiled_submodule_is_refused_by_name(no_trace: None):
    model = Net()
    model.head = torch.compile(model.head)  # type: ignore[assignment]
    with pytest.raises(
        UnsupportedWorkloadError, match=r"the submodule 'head' is torch\.compile\(Linear\)"
    ):
        estimate(model, _x)


def test_a_compiled_loss_fn_is_refused_by_name(no_trace: None):
    def my_loss(model: nn.Module, batch: Any) -> torch.Tensor:
        return model(batch).sum()  # type: ignore[no-any-return]

    with pytest.raises(UnsupportedWorkloadError, match=r"loss_fn=my_loss is compiled.*" + FIX):
        estimate(Net(), _x, loss_fn=torch.compile(my_loss))


def test_a_compiled_step_fn_is_refused_by_name(no_trace: None):
    from memfit.workload import WorkloadOptions

    if "step_fn" not in WorkloadOptions.__annotations__:
        pytest.skip("step_fn= is not a setting yet")

    def my_step(model: nn.Module, batch: Any, optimizer: Any) -> None:
        model(batch).sum().backward()

    with pytest.raises(UnsupportedWorkloadError, match=r"step_fn=my_step is compiled.*" + FIX):
        estimate(Net(), _x, step_fn=torch.compile(my_step))  # type: ignore[call-arg]


def test_compiled_eager_for_a_model_that_is_not_compiled_is_refused():
    with pytest.raises(
        InvalidInputError,
        match=r"compiled='eager' .* given, but the model Net \(nor anything its step calls\) is "
        r"not compiled .* would be ignored.* Drop compiled='eager'",
    ):
        estimate(Net(), _x, compiled="eager")


def test_an_unknown_compiled_setting_is_refused(no_trace: None):
    with pytest.raises(
        InvalidInputError, match=r"compiled='max-autotune' is not a setting.*'eager'"
    ):
        estimate(torch.compile(Net()), _x, compiled="max-autotune")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=r"compiled=True is not a setting"):
        make_workload(Net(), _x, compiled=True)  # type: ignore[typeddict-item]


# -- compiled while the step runs, refused in the trace ---------------------------------------


def test_torch_compile_in_a_model_factory_is_refused_naming_the_module():
    def make_model() -> nn.Module:
        return torch.compile(Net(), mode="max-autotune")  # type: ignore[return-value]

    with pytest.raises(
        UnsupportedWorkloadError,
        match=r"torch\.compile was called on the module Net during setup \(while the model was "
        r"built\)\. .*" + FIX,
    ):
        estimate(make_model, _x)


def test_module_compile_in_a_model_factory_is_refused():
    def make_model() -> nn.Module:
        net = Net()
        net.compile()
        return net

    with pytest.raises(UnsupportedWorkloadError, match=r"the module Net \(by Net\.compile\(\)\)"):
        estimate(make_model, _x)


def test_a_factory_returning_a_compiled_model_is_refused():
    with torch.device("meta"):
        ready = torch.compile(Net(), backend="eager")
    with pytest.raises(
        UnsupportedWorkloadError,
        match=r"the model factory returned a compiled model: the model is torch\.compile\(Net\)",
    ):
        estimate(lambda: ready, _x)


class CompilesInForward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = Net()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.compile(self.inner)(x)  # type: ignore[no-any-return]


def test_torch_compile_in_forward_is_refused_naming_the_phase():
    with pytest.raises(
        UnsupportedWorkloadError,
        match=r"torch\.compile was called on the module Net during step1\.forward.*" + FIX,
    ):
        estimate(CompilesInForward(), _x)


def test_dynamo_optimize_in_the_step_is_refused():
    import torch._dynamo

    plain = make_workload(Net(), _x, mode="infer")

    def forward(model: nn.Module, batch: torch.Tensor) -> Any:
        return torch._dynamo.optimize("eager")(model)(batch)

    with pytest.raises(UnsupportedWorkloadError, match=r"torch\._dynamo\.optimize was called"):
        estimate_workload(dataclasses.replace(plain, forward_fn=forward))


def test_a_compiled_forward_fn_is_refused_before_the_trace():
    plain = make_workload(Net(), _x, mode="infer")
    forward = torch.compile(lambda model, batch: model(batch))
    with pytest.raises(UnsupportedWorkloadError, match=r"forward_fn=<lambda> is compiled.*" + FIX):
        estimate_workload(dataclasses.replace(plain, forward_fn=forward))


def test_a_compiled_function_called_in_the_step_is_refused():
    helper = torch.compile(lambda t: t * 2)
    with pytest.raises(
        UnsupportedWorkloadError,
        match=r"a function or module compiled with torch\.compile before the trace was called "
        r"during step1\.forward.*" + FIX,
    ):
        estimate(Net(), _x, loss_fn=lambda model, batch: helper(model(batch)).sum())


def test_torch_compile_inside_a_step_fn_is_refused_naming_the_phase():
    def step(model: nn.Module, batch: Any, optimizer: Any) -> None:
        torch.compile(model)(batch).sum().backward()
        optimizer.step()

    with pytest.raises(
        UnsupportedWorkloadError,
        match=r"torch\.compile was called on the module Net during step1\.forward.*" + FIX,
    ):
        estimate(Net(), _x, step_fn=step)


def test_a_compiled_step_in_a_model_file_is_refused_before_the_trace(tmp_path: Path):
    path = tmp_path / "compiled_step.py"
    path.write_text(COMPILED_STEP_FILE)
    with pytest.raises(UnsupportedWorkloadError, match=r"step_fn=step is compiled.*" + FIX):
        estimate(f"{path}:make_model", batch_size=2)


def test_compiled_eager_for_a_factory_that_compiles_nothing_is_refused():
    with pytest.raises(InvalidInputError, match=r"but the model Net \(nor anything its step"):
        estimate(Net, _x, compiled="eager")


# -- the command line ------------------------------------------------------------------------

COMPILED_FILE = """\
import torch


def make_model():
    return torch.compile(torch.nn.Sequential(torch.nn.Linear(8, 8)), **COMPILE)


COMPILE = {"mode": "max-autotune"}  # a mode compiled estimates do not take


def make_batch(n, seq_len):
    return torch.randn(n, 8)
"""


COMPILED_STEP_FILE = """\
import torch


def make_model():
    return torch.nn.Sequential(torch.nn.Linear(8, 8))


def make_batch(n, seq_len):
    return torch.randn(n, 8)


@torch.compile
def step(model, batch, optimizer):
    model(batch).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
"""


@pytest.fixture
def compiled_file(tmp_path: Path) -> str:
    path = tmp_path / "compiled_model.py"
    path.write_text(COMPILED_FILE)
    return f"{path}:make_model"


@pytest.fixture
def tiny(tmp_path: Path) -> str:
    """The same file, uncompiled."""
    path = tmp_path / "tiny_model.py"
    path.write_text(COMPILED_FILE.replace("torch.compile(", "(").replace(", **COMPILE", ""))
    return f"{path}:make_model"


def _run(capsys: pytest.CaptureFixture[str], argv: list[str], code: int) -> tuple[str, str]:
    assert main(argv) == code
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    return captured.out, captured.err


def test_cli_refuses_a_compiled_file_model_with_the_flag_to_use(capsys, compiled_file):
    _, err = _run(capsys, ["estimate", compiled_file, "-b", "2"], 1)
    text = " ".join(err.split())
    assert "torch.compile was called on the module Sequential during setup" in text
    assert "--compiled eager" in text


def test_cli_compiled_eager_estimates_with_the_note(capsys, compiled_file):
    out, _ = _run(capsys, ["estimate", compiled_file, "-b", "2", "--compiled", "eager"], 0)
    assert "usually more than the compiled step takes" in " ".join(out.split())


def test_cli_compiled_eager_on_a_model_that_is_not_compiled_is_refused(capsys, tiny):
    _, err = _run(capsys, ["estimate", tiny, "-b", "2", "--compiled", "eager"], 1)
    assert "is not compiled with torch.compile" in " ".join(err.split())


def test_cli_an_unknown_compiled_value_is_refused_by_the_parser(capsys, tiny):
    with pytest.raises(SystemExit) as exit_:
        main(["estimate", tiny, "-b", "2", "--compiled", "inductor"])
    assert exit_.value.code == 2
    assert "invalid choice: 'inductor'" in capsys.readouterr().err


def test_the_refusal_is_a_memfit_error():
    assert issubclass(memfit.UnsupportedWorkloadError, memfit.MemfitError)


# -- torch.compile's activation memory budget -------------------------------------------------


@pytest.mark.parametrize("value", [True, -0.1, 1.5, "0.5", float("nan")])
def test_an_activation_memory_budget_that_is_not_a_share_is_refused(value: object):
    with pytest.raises(InvalidInputError, match=r"not a share between 0 and 1.*e\.g\. 0\.5"):
        make_workload(torch.compile(Net()), _x, activation_memory_budget=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("settings", "why"),
    [
        ({"compiled": "eager"}, "compiled='eager' estimates the uncompiled step"),
        ({"mode": "infer"}, "inference saves no activations"),
        ({"activation_checkpointing": True}, "memfit's checkpointing of eager blocks"),
    ],
)
def test_an_activation_memory_budget_that_would_be_ignored_is_refused(
    settings: dict[str, Any], why: str
):
    with pytest.raises(
        InvalidInputError, match=rf"activation_memory_budget=0.5 would be ignored.*{why}"
    ):
        make_workload(torch.compile(Net()), _x, activation_memory_budget=0.5, **settings)


def test_an_activation_memory_budget_for_a_model_that_compiles_nothing_is_refused():
    with pytest.raises(
        InvalidInputError, match=r"Net's step compiles nothing.*activation_checkpointing"
    ):
        estimate(Net(), _x, activation_memory_budget=0.5)


def test_the_command_line_refuses_a_budget_outside_zero_to_one(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as exit_info:
        main(["estimate", "gpt2", "-b", "1", "--activation-memory-budget", "1.5"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--activation-memory-budget: 1.5 is not between 0 and 1" in err
    assert "Traceback" not in err
