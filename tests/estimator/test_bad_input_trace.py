"""Bad input that only the trace meets: errors name the real cause (the value, the op, the
module, the phase, the user's own frame) and the fix, and the custom-kernel hint appears only
where it applies. Every model here is one or two small layers: each case takes milliseconds.
Also: results print short (``repr``/``str`` of an Estimate without its whole timeline)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from memfit import InvalidInputError, MemfitError, TraceError, estimate
from memfit._errors import UserCodeError

THIS_FILE = Path(__file__).name


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


def _x() -> torch.Tensor:
    return torch.randn(4, 8)


# -- loss_fn ----------------------------------------------------------------------------------


def test_loss_fn_of_the_wrong_arity_is_refused_before_tracing(monkeypatch: pytest.MonkeyPatch):
    def reached(*args: object) -> None:
        raise AssertionError("the model was built before loss_fn was checked")

    monkeypatch.setattr(Net, "__init__", reached)
    with pytest.raises(InvalidInputError, match=r"<lambda> cannot be called as loss_fn\(model, "):
        estimate(Net, _x, loss_fn=lambda m: 0)  # type: ignore[arg-type,misc]


def test_loss_fn_returning_a_python_float_names_the_value():
    with pytest.raises(InvalidInputError, match=r"loss_fn returned float 0\.5: return a scalar"):
        estimate(Net, _x, loss_fn=lambda m, b: 0.5)  # type: ignore[arg-type,return-value]


def test_loss_fn_returning_loss_item_says_not_item():
    def loss(m: nn.Module, b: Any) -> Any:
        return None

    with pytest.raises(InvalidInputError, match=r"returned NoneType None.*not loss\.item\(\)"):
        estimate(Net, _x, loss_fn=loss)


def test_loss_fn_returning_a_non_scalar_names_its_shape():
    with pytest.raises(InvalidInputError, match=r"shape \(4, 8\), not a scalar.*\.sum\(\)"):
        estimate(Net, _x, loss_fn=lambda m, b: m(b))


def test_loss_fn_returning_a_tensor_without_grad():
    def loss(m: nn.Module, b: torch.Tensor) -> torch.Tensor:
        return torch.zeros((), device=b.device)

    with pytest.raises(InvalidInputError, match=r"does not require grad"):
        estimate(Net, _x, loss_fn=loss)


def test_an_exception_in_the_users_loss_fn_is_shown_as_theirs():
    def loss(m: nn.Module, b: Any) -> torch.Tensor:
        raise ValueError("labels are missing from the batch")

    with pytest.raises(UserCodeError, match=r"Your code raised ValueError during step1\.forward"):
        estimate(Net, _x, loss_fn=loss)


def test_users_error_names_their_file_and_line():
    def loss(m: nn.Module, b: Any) -> torch.Tensor:
        return {}["labels"]  # type: ignore[no-any-return]

    with pytest.raises(UserCodeError, match=rf"{THIS_FILE}:\d+, in loss\): key 'labels'") as info:
        estimate(Net, _x, loss_fn=loss)
    assert info.value.location is not None and THIS_FILE in info.value.location


def test_an_op_failing_in_the_users_code_names_op_phase_and_frame():
    def loss(m: nn.Module, b: torch.Tensor) -> torch.Tensor:
        return m(b).view(3, 7).sum()

    with pytest.raises(TraceError) as info:
        estimate(Net, _x, loss_fn=loss)
    text = str(info.value)
    assert "op aten::view" in text and "step1.forward" in text
    assert f"{THIS_FILE}:" in text and "in loss" in text
    assert "shape '[3, 7]' is invalid" in text
    assert "register_fake" not in text  # a PyTorch op: the custom-kernel hint does not apply
    assert info.value.op == "aten::view"


# -- the batch --------------------------------------------------------------------------------


def test_a_none_batch_is_named():
    # caught where make_batch is called (workload) or, for a Workload made by hand, by the trace
    with pytest.raises(InvalidInputError, match=r"make_batch.*returned None"):
        estimate(Net, lambda: None)


def test_a_dict_batch_that_does_not_match_forward_names_keys_and_parameters():
    batch = {"x": torch.randn(4, 8), "labels": torch.zeros(4)}
    with pytest.raises(InvalidInputError) as info:
        estimate(Net, lambda: batch)
    text = str(info.value)
    assert "unexpected keyword argument 'labels'" in text
    assert "keys ['labels', 'x'] (called as model(**batch))" in text
    assert "Net.forward's parameters are (x)" in text and "loss_fn=" in text


def test_a_tuple_batch_of_the_wrong_length_names_its_length():
    batch = (torch.randn(4, 8), torch.randn(4, 8))
    with pytest.raises(InvalidInputError, match=r"a tuple of 2 \(called as model\(\*batch\)\)"):
        estimate(Net, lambda: batch)


def test_an_error_inside_transformers_is_shown_as_in_transformers():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=32)

    def build() -> nn.Module:
        return transformers.GPT2LMHeadModel(config)  # type: ignore[no-any-return]

    with pytest.raises(TraceError) as info:
        estimate(build, lambda: {"input_ids": torch.randn(2, 8)}, mode="infer")
    text = str(info.value)
    assert "op aten::embedding in transformer.wte" in text
    assert "Called from transformers (models/gpt2/modeling_gpt2.py:" in text
    assert "scalar types: Long, Int" in text and "register_fake" not in text


# -- custom ops -------------------------------------------------------------------------------


@torch.library.custom_op("memfit_bad_input::no_fake", mutates_args=())
def no_fake(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


class UsesCustomOp(Net):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return no_fake(self.proj(x))


def test_a_custom_op_without_a_fake_gets_the_hint_once():
    with pytest.raises(TraceError) as info:
        estimate(UsesCustomOp, _x)
    text = str(info.value)
    assert (
        "no shape for memfit_bad_input::no_fake, called in UsesCustomOp's forward of step 1" in text
    )
    assert text.count("torch.library.register_fake") == 1 and "custom CUDA extension" in text
    assert "--debug" not in text  # the CLI says it, once


def test_the_cli_says_debug_once_and_shows_no_traceback(tmp_path: Path, capsys: Any):
    from memfit.cli import main

    path = tmp_path / "user_model.py"
    path.write_text(
        "import torch\n\n\n"
        "def make():\n    return torch.nn.Linear(8, 8)\n\n\n"
        "def make_batch(n, seq_len):\n    return torch.randn(n, 8)\n\n\n"
        "def loss_fn(model, batch):\n    return 0.5\n"
    )
    assert main(["estimate", f"{path}:make", "-b", "2"]) == 1
    captured = capsys.readouterr()
    out = captured.err + captured.out
    assert "Traceback" not in out
    assert "loss_fn returned float 0.5" in out
    assert len([line for line in out.splitlines() if "--debug" in line]) == 1
    assert "--debug" not in out.splitlines()[0]


def test_the_cli_names_a_none_batch(tmp_path: Path, capsys: Any):
    from memfit.cli import main

    path = tmp_path / "none_batch.py"
    path.write_text(
        "import torch\n\n\n"
        "def make():\n    return torch.nn.Linear(8, 8)\n\n\n"
        "def make_batch(n, seq_len):\n    return None\n"
    )
    assert main(["estimate", f"{path}:make", "-b", "2"]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    assert "make_batch returned None" in captured.err


def test_every_trace_error_is_a_memfit_error():
    assert issubclass(TraceError, MemfitError) and issubclass(UserCodeError, MemfitError)


# -- short repr and str -----------------------------------------------------------------------


def _deep() -> nn.Module:
    return nn.Sequential(*[nn.Linear(32, 32) for _ in range(40)])


@pytest.fixture(scope="module")
def long_estimate() -> Any:
    return estimate(_deep, lambda: torch.randn(4, 32), gpu="h100")


def test_estimate_repr_is_short_and_names_the_peaks(long_estimate: Any):
    est = long_estimate
    assert len(est.timeline.allocated) > 500  # the dataclass repr would print all of them
    text = repr(est)
    assert len(text) < 400
    assert f"peak_allocated={est.peak_allocated} (" in text and "GiB)" in text
    assert f"timeline=Timeline({len(est.timeline.allocated)} events" in text
    assert "fits=True" in text and "H100" in text


def test_estimate_str_is_a_few_readable_lines(long_estimate: Any):
    text = str(long_estimate)
    assert len(text) < 600 and len(text.splitlines()) <= 5
    assert "peak allocated" in text and "MiB" in text and "fits" in text


def test_estimate_repr_without_a_gpu_has_no_verdict():
    est = estimate(Net, _x)
    assert "fits=" not in repr(est) and "Timeline(" in repr(est)
    assert len(repr(est.timeline)) < 60


def test_a_batch_of_the_wrong_width_names_the_op_and_the_batch_shape():
    with pytest.raises(TraceError) as info:
        estimate(Net, lambda: torch.randn(2, 9))
    text = str(info.value)
    assert "op aten::addmm in proj failed during step1.forward" in text
    assert "[2, 9] X [8, 8]" in text and "a tensor of shape (2, 9)" in text


def test_an_error_while_setting_up_names_the_setup_and_the_users_line():
    def optimizer(params: Any) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=-1)

    with pytest.raises(TraceError) as info:
        estimate(Net, _x, optimizer=optimizer)
    text = str(info.value)
    assert "the step failed during setup" in text and "Invalid learning rate: -1" in text
    assert f"{THIS_FILE}:" in text and "in optimizer" in text


def test_linear_called_with_keywords_traces():
    # timm's BEiT, EVA-02 and Swin-V2 call F.linear(x, weight=..., bias=...)
    class KeywordLinear(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = x.transpose(0, 1)  # non-contiguous, 3-d: the in-place bias path
            return torch.nn.functional.linear(y, weight=self.proj.weight, bias=self.proj.bias)

    est = estimate(KeywordLinear, lambda: torch.randn(4, 6, 8))
    assert est.peak_allocated > 0
