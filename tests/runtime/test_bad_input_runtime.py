"""Bad input to the runtime's public constructors: refused at construction, with the value
and the fix, as an InvalidInputError (never a TypeError at the first step, never an injector
that silently never fires)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import memfit
from memfit import InvalidInputError
from memfit.runtime import AutoMicrobatch, InjectOOM, LeakDetector, find_batch_size


def _model() -> nn.Module:
    return nn.Linear(4, 2)


def _loss(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    return model(batch).sum()


def _sgd(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.1)


# -- AutoMicrobatch ---------------------------------------------------------------------------


def test_automicrobatch_refuses_an_optimizer_name():
    model = _model()
    with pytest.raises(InvalidInputError, match=r"optimizer='sgd'.*not a torch\.optim\.Optimizer"):
        AutoMicrobatch(model, "sgd", _loss)  # type: ignore[arg-type]


def test_automicrobatch_optimizer_message_gives_the_fix():
    with pytest.raises(InvalidInputError, match=r"torch\.optim\.SGD\(model\.parameters\(\)"):
        AutoMicrobatch(_model(), object(), _loss)  # type: ignore[arg-type]


def test_automicrobatch_refuses_a_model_that_is_not_a_module():
    with pytest.raises(InvalidInputError, match=r"needs a torch\.nn\.Module as model.*'gpt2'"):
        AutoMicrobatch("gpt2", None, _loss)  # type: ignore[arg-type]


def test_automicrobatch_refuses_a_loss_that_is_not_callable():
    model = _model()
    with pytest.raises(InvalidInputError, match=r"loss_fn='mse'.*is not callable.*loss_fn\(model"):
        AutoMicrobatch(model, _sgd(model), "mse")  # type: ignore[arg-type]


def test_automicrobatch_refuses_a_loss_of_the_wrong_arity():
    model = _model()
    with pytest.raises(InvalidInputError, match=r"cannot be called as loss_fn\(model, batch\)"):
        AutoMicrobatch(model, _sgd(model), lambda batch: batch.sum())  # type: ignore[arg-type]


def test_automicrobatch_accepts_a_loss_with_extra_defaults():
    model = _model()

    def loss(model: nn.Module, batch: Any, scale: float = 1.0) -> torch.Tensor:
        return model(batch).sum() * scale

    guard = AutoMicrobatch(model, _sgd(model), loss)
    assert guard.step(torch.randn(3, 4)).dim() == 0


def test_automicrobatch_refuses_a_scaler_that_is_not_one():
    model = _model()
    with pytest.raises(InvalidInputError, match=r"scaler='fp16'.*torch\.amp\.GradScaler\(\)"):
        AutoMicrobatch(model, _sgd(model), _loss, scaler="fp16")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["split_fn", "size_fn", "before_step", "on_incident"])
def test_automicrobatch_refuses_hooks_that_are_not_callable(name: str):
    model = _model()
    with pytest.raises(InvalidInputError, match=rf"{name}=3 \(a int\) is not callable"):
        AutoMicrobatch(model, _sgd(model), _loss, **{name: 3})


# -- InjectOOM --------------------------------------------------------------------------------


def test_injectoom_refuses_optimizer_step_zero_with_the_range():
    model = _model()
    with pytest.raises(InvalidInputError, match=r"optimizer_steps contains 0.*counted from 1"):
        InjectOOM(model, optimizer=_sgd(model), optimizer_steps=[0])


def test_injectoom_optimizer_step_one_is_the_first():
    model = _model()
    optimizer = _sgd(model)
    with InjectOOM(model, optimizer=optimizer, optimizer_steps=[1]) as oom:
        model(torch.randn(2, 4)).sum().backward()
        with pytest.raises(torch.OutOfMemoryError):
            optimizer.step()
    assert oom.raised == ["optimizer: step 1"]


def test_injectoom_refuses_call_zero():
    with pytest.raises(InvalidInputError, match=r"calls contains 0.*forward calls are counted"):
        InjectOOM(_model(), calls=[0])


def test_injectoom_refuses_a_bare_number_of_calls():
    with pytest.raises(InvalidInputError, match=r"calls=2 is not a collection.*calls=\[1, 3\]"):
        InjectOOM(_model(), calls=2)  # type: ignore[arg-type]


def test_injectoom_refuses_a_string_max_samples():
    with pytest.raises(InvalidInputError, match=r"max_samples='8'.*whole number >= 0"):
        InjectOOM(_model(), max_samples="8")  # type: ignore[arg-type]


def test_injectoom_refuses_a_model_that_is_not_a_module():
    with pytest.raises(InvalidInputError, match=r"needs the torch\.nn\.Module.*not a str"):
        InjectOOM("model")  # type: ignore[arg-type]


def test_injectoom_refuses_an_optimizer_name():
    with pytest.raises(InvalidInputError, match=r"optimizer='sgd' is not a torch\.optim"):
        InjectOOM(_model(), optimizer="sgd", optimizer_steps=[1])  # type: ignore[arg-type]


# -- LeakDetector -----------------------------------------------------------------------------


def test_leak_detector_refuses_a_string_window():
    with pytest.raises(InvalidInputError, match=r"window='5'.*int of 2 or more"):
        LeakDetector(window="5")  # type: ignore[arg-type]


def test_leak_detector_refuses_an_on_leak_that_is_not_callable():
    with pytest.raises(InvalidInputError, match=r"on_leak='print' is not callable.*on_leak=print"):
        LeakDetector(on_leak="print")  # type: ignore[arg-type]


def test_leak_detector_refuses_a_min_growth_that_is_not_a_size():
    with pytest.raises(InvalidInputError, match=r"min_growth=None is not a size.*'1MiB'"):
        LeakDetector(min_growth=None)  # type: ignore[arg-type]


# -- find_batch_size --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"), [("max_batch", "64"), ("multiple_of", 8.0), ("max_trials", None)]
)
def test_find_batch_size_refuses_counts_that_are_not_ints(name: str, value: Any):
    with pytest.raises(InvalidInputError, match=rf"{name}={value!r} is not a whole number"):
        find_batch_size(
            _model, lambda n: torch.randn(n, 4), confirm=False, gpu="24GiB", **{name: value}
        )


@pytest.mark.parametrize("margin", [None, True, [0.1]])
def test_find_batch_size_refuses_a_margin_of_the_wrong_type(margin: Any):
    with pytest.raises(InvalidInputError, match=r"margin=.* is not accepted.*'512MiB'"):
        find_batch_size(
            _model, lambda n: torch.randn(n, 4), confirm=False, gpu="24GiB", margin=margin
        )


def test_errors_are_memfit_errors():
    assert issubclass(InvalidInputError, memfit.MemfitError)


def test_batch_size_result_repr_is_short_with_many_estimates():
    from memfit.runtime import BatchSizeResult
    from memfit.runtime._bs_search import Point

    points = [Point(b, 2**30, 2**30, 2**31, 0.5) for b in range(1, 201)]
    result = BatchSizeResult(
        batch_size=200,
        confirmed=False,
        gpu="H100",
        gpu_total=80 * 2**30,
        budget=78 * 2**30,
        margin=2 * 2**30,
        predicted_peak_reserved=2**30,
        predicted_peak_allocated=2**30,
        predicted_need=2**30,
        predicted_total=2**31,
        predicted_alloc_retries=None,
        per_sample=2**20,
        limited_by="max_batch",
        estimates=points,
    )
    text = repr(result)
    assert len(text) < 300 and "estimates=[200 points]" in text and "batch_size=200" in text


@pytest.mark.parametrize("n", ["2", 0, 2.0])
def test_split_batch_refuses_a_count_that_is_not_a_positive_int(n: Any):
    from memfit.runtime import split_batch

    with pytest.raises(InvalidInputError, match=rf"cannot be split into {n!r} micro-batches.*int"):
        split_batch(torch.randn(4, 2), n)
