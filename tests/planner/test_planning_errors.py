"""memfit.plan's bad input: each is refused before anything is traced, with the value and the
fix in one paragraph."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from memfit import InvalidInputError, UnsupportedWorkloadError
from memfit.planner import plan


def model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2))


def batch_of(n: int) -> torch.Tensor:
    return torch.randn(n, 8)


def loss(m: nn.Module, b: Any) -> torch.Tensor:
    return m(b).sum()


def planned(**options: Any) -> Any:
    settings: dict[str, Any] = {
        "batch_of": batch_of,
        "budget": "1GiB",
        "global_batch": 4,
        "batch_size": 4,
        "loss_fn": loss,
        "workers": 1,
        **options,
    }
    return plan(model(), **settings)


@pytest.mark.parametrize(
    ("budget", "match"),
    [
        ("-3GiB", r"-3GiB"),
        ("abc", r"abc"),
        ("100MiB", r"100MiB.*context|context.*100MiB|smaller than"),
        (24, r"24GiB|unit"),
        (None, r"budget='24GiB'"),
    ],
)
def test_a_budget_that_is_no_gpu_memory_is_refused(budget: Any, match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        planned(budget=budget)


@pytest.mark.parametrize("margin", [-0.1, 0.5, 1.5, "5%", True])
def test_a_margin_that_is_not_a_share_is_refused(margin: Any) -> None:
    with pytest.raises(InvalidInputError, match=r"margin=.*margin=0\.05"):
        planned(margin=margin)


@pytest.mark.parametrize("workers", [0, -2, 1.5, "2", True])
def test_workers_that_are_no_number_of_processes_are_refused(workers: Any) -> None:
    with pytest.raises(InvalidInputError, match=r"workers=.*whole number >= 1"):
        planned(workers=workers)


@pytest.mark.parametrize("cache_freeing", ["no", 0, None])
def test_cache_freeing_that_is_not_a_bool_is_refused(cache_freeing: Any) -> None:
    with pytest.raises(InvalidInputError, match=r"cache_freeing=.* is not True or False"):
        planned(cache_freeing=cache_freeing)


def test_inference_is_not_planned() -> None:
    with pytest.raises(InvalidInputError, match=r"mode='infer'.*memfit\.estimate"):
        plan(model(), batch_of=batch_of, budget="1GiB", batch_size=4, mode="infer", workers=1)


def test_a_step_function_of_ones_own_cannot_be_changed() -> None:
    def step(m: nn.Module, b: Any, opt: Any) -> None:
        m(b).sum().backward()

    with pytest.raises(UnsupportedWorkloadError, match=r"step function.*loss_fn"):
        plan(model(), batch_of=batch_of, budget="1GiB", batch_size=4, step_fn=step, workers=1)


def test_an_optimizer_factory_cannot_be_varied() -> None:
    with pytest.raises(InvalidInputError, match=r"optimizer='adamw'"):
        planned(optimizer=lambda params: torch.optim.SGD(params, lr=0.1))


def test_a_fixed_batch_cannot_be_split() -> None:
    with pytest.raises(InvalidInputError, match=r"batch is fixed.*batch_size"):
        plan(model(), torch.randn(4, 8), budget="1GiB", loss_fn=loss, workers=1)


def test_a_global_batch_the_micro_batch_does_not_divide_is_refused() -> None:
    with pytest.raises(InvalidInputError, match=r"global_batch=6 is not a multiple of batch_si"):
        planned(global_batch=6)


def test_an_unknown_precision_to_search_is_refused() -> None:
    with pytest.raises(InvalidInputError, match=r"fp64"):
        planned(precisions=("fp64",))


def test_an_unknown_optimizer_to_search_is_refused() -> None:
    with pytest.raises(InvalidInputError, match=r"adamw-sideways"):
        planned(optimizers=("adamw-fused", "adamw-sideways"))
