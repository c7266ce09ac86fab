"""memfit.plan's bad input: each is refused before anything is traced, with the value and the
fix in one paragraph."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from memfit import InvalidInputError, UnsupportedWorkloadError, resolve_gpu
from memfit._gpus import KNOWN_GPUS
from memfit.planner import plan, plan_target


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
        (None, r"plan needs the GPU memory to fit.*gpu='24GiB'"),
    ],
)
def test_a_budget_that_is_no_gpu_memory_is_refused(budget: Any, match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        planned(budget=budget)


def test_gpu_is_the_budget_given_by_its_other_name() -> None:
    """memfit.plan(model, gpu="h100") plans for an H100, as memfit.estimate's gpu= names it."""
    narrow = {"precisions": ("fp32",), "optimizers": ("adamw",), "checkpointing": (False,)}
    by_gpu = planned(budget=None, gpu="h100", **narrow)
    assert by_gpu.budget == resolve_gpu("h100").total
    assert by_gpu.usable == int(resolve_gpu("h100").total * 0.95)


def test_neither_gpu_nor_budget_is_a_memfit_error_not_a_type_error() -> None:
    with pytest.raises(InvalidInputError, match=r"needs the GPU memory to fit.*gpu='24GiB'"):
        plan(model(), batch_of=batch_of, global_batch=4, batch_size=4, loss_fn=loss, workers=1)


@pytest.mark.parametrize(
    ("gpu", "budget", "match"),
    [
        ("24GiB", "20GiB", r"gpu='24GiB' and budget='20GiB' were both given, and gpu= is a size"),
        ("24GiB", "h100", r"gpu='24GiB' and budget='h100' were both given.*one of them"),
        ("h100", "a100-40g", r"gpu='h100' and budget='a100-40g' both name a GPU.*one of them"),
        ("h100", "-5GiB", r"-5GiB"),
        ("h1000", "20GiB", r"h1000"),
    ],
)
def test_gpu_and_budget_that_say_one_thing_twice_are_refused(
    gpu: str, budget: str, match: str
) -> None:
    with pytest.raises(InvalidInputError, match=match):
        planned(budget=budget, gpu=gpu)


def test_a_gpu_name_with_a_budget_plans_that_gpu_in_part_of_its_memory() -> None:
    """As memfit.fit takes them: the A100's speed, 20 GiB of its memory."""
    target = plan_target("20GiB", "a100-40g")
    a100 = KNOWN_GPUS["a100-40g"]
    assert target.total == 20 * 2**30
    assert (target.name, target.compute_capability) == (a100.name, a100.compute_capability)
    assert plan_target(None, "24GiB") == plan_target("24GiB", None) == resolve_gpu("24GiB")


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
