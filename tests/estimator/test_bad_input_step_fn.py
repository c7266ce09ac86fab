"""Bad input of a user's step function (``step_fn`` and a file's ``step``): each is refused in one
paragraph that names the value and the fix, before any tracing where it can be; a step that
raises or calls an op memfit cannot run names the op, the module and the phase. Tiny models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from memfit import InvalidInputError, TraceError, estimate
from memfit._errors import UserCodeError
from memfit.cli import main


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


def _x() -> torch.Tensor:
    return torch.randn(4, 8)


def train_step(model: nn.Module, batch: Any, optimizer: Any) -> None:
    model(batch).sum().backward()
    optimizer.step()
    optimizer.zero_grad()


def test_a_step_that_is_not_callable():
    with pytest.raises(InvalidInputError, match=r"step_fn='step' is not callable: give a function"):
        estimate(Net, _x, step_fn="step")  # type: ignore[arg-type]


def test_an_inference_step_in_training_mode_says_mode_infer():
    with pytest.raises(
        InvalidInputError,
        match=r"takes \(model, batch\), an inference step: "
        r"pass mode='infer'",
    ):
        estimate(Net, _x, step_fn=lambda m, b: m(b))


def test_a_training_step_in_inference_mode_says_mode_train():
    with pytest.raises(InvalidInputError, match=r"a training step: pass mode='train'"):
        estimate(Net, _x, mode="infer", step_fn=train_step)


def test_a_step_of_the_wrong_arity_shows_an_example():
    with pytest.raises(
        InvalidInputError,
        match=r"give a function of three arguments, e\.g\. "
        r"def step\(model, batch, optimizer\)",
    ):
        estimate(Net, _x, step_fn=lambda: None)


def test_loss_fn_beside_a_step_is_refused():
    with pytest.raises(
        InvalidInputError,
        match=r"loss_fn and step_fn given together.*Drop "
        r"loss_fn",
    ):
        estimate(Net, _x, step_fn=train_step, loss_fn=lambda m, b: m(b).sum())


@pytest.mark.parametrize("precision", ["bf16-mixed", "fp16-mixed"])
def test_mixed_precision_beside_a_step_points_to_autocast_in_the_step(precision: str):
    with pytest.raises(
        InvalidInputError,
        match=rf"precision='{precision}' with step_fn.*"
        r"torch\.autocast\('cuda'",
    ):
        estimate(Net, _x, step_fn=train_step, precision=precision)


def test_a_training_step_without_backward_is_refused():
    def no_backward(model: nn.Module, batch: Any, optimizer: Any) -> None:
        model(batch)

    with pytest.raises(
        InvalidInputError,
        match=r"ran no backward pass, yet mode='train'.*"
        r"mode='infer'",
    ):
        estimate(Net, _x, step_fn=no_backward)


def test_an_optimizer_factory_returning_something_else_is_named():
    with pytest.raises(
        InvalidInputError,
        match=r"optimizer factory returned 42: with a step "
        r"function it is given the model",
    ):
        estimate(Net, _x, step_fn=train_step, optimizer=lambda model: 42)


def test_an_exception_in_the_step_is_shown_as_the_users_with_its_line_and_phase():
    def step(model: nn.Module, batch: Any, optimizer: Any) -> None:
        model(batch).sum()
        raise ValueError("forgot the labels")

    with pytest.raises(
        UserCodeError,
        match=r"Your code raised ValueError during "
        r"step1\.forward \(at .*test_bad_input_step_fn\.py:\d+, in step\): "
        r"forgot the labels",
    ) as info:
        estimate(Net, _x, step_fn=step)
    assert "CUDA extension" not in str(info.value)


def test_an_op_without_a_fake_kernel_names_the_op_the_module_and_the_phase():
    lib = torch.library.Library("memfit_test_step", "DEF")
    lib.define("opaque(Tensor x) -> Tensor")
    lib.impl("opaque", lambda x: x.clone(), "CPU")

    class Opaque(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.ops.memfit_test_step.opaque(self.proj(x))

    def step(model: nn.Module, batch: Any, optimizer: Any) -> None:
        model(batch).sum().backward()

    with pytest.raises(
        TraceError,
        match=r"no shape for memfit_test_step::opaque, called in Opaque's forward of step 1",
    ) as info:
        estimate(Opaque, _x, step_fn=step)
    assert "called as model(batch)" not in str(info.value)


def test_the_users_objects_are_untouched_when_the_step_fails():
    model = Net()
    before = model.proj.weight.clone()

    def step(model: nn.Module, batch: Any, optimizer: Any) -> None:
        model(batch).sum().backward()
        raise RuntimeError("boom")

    with pytest.raises(UserCodeError):
        estimate(model, _x, step_fn=step)
    assert torch.equal(model.proj.weight, before) and model.proj.weight.grad is None


FILE = """
import torch
from torch import nn

def make_model():
    return nn.Linear(8, 8)

def make_batch(batch_size, seq_len):
    return torch.randn(batch_size, 8)
"""


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            "def step(model, batch, optimizer):\n    pass\n"
            "def loss_fn(model, batch):\n    return model(batch).sum()\n",
            "defines both step and loss_fn",
        ),
        (
            "def make_optimizer(model):\n    return torch.optim.SGD(model.parameters(), lr=1)\n",
            "defines make_optimizer but no step",
        ),
        ("step = 3\n", "step is 3, not a function"),
        (
            "def step(model, batch):\n    return model(batch)\n",
            "an inference step: pass mode='infer'",
        ),
    ],
)
def test_a_files_step_errors_exit_non_zero_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: str, message: str
):
    path = tmp_path / "job.py"
    path.write_text(FILE + extra)
    code = main(["estimate", f"{path}:make_model", "--batch-size", "4"])
    err = capsys.readouterr().err
    assert code != 0
    assert message in err.replace("\n", " ")
    assert "Traceback" not in err
