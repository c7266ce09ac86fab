"""``memfit.fit``: plan the fastest step that fits a budget, on the CPU, and apply it.

``fit`` is :func:`memfit.planner.plan` then :func:`memfit.apply`. The planner traces batches of
several sizes; they are made from the example batch (:func:`batch_maker`): its rows repeated or
cut along dim 0, copied to the CPU, the user's tensors never touched.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from memfit._errors import InvalidInputError
from memfit._gpus import GPU
from memfit.runtime._apply import apply
from memfit.runtime._guard_checks import check_parts, refuse_sharded
from memfit.runtime._microbatch import LossFn
from memfit.runtime._planned_step import PlannedStep
from memfit.runtime._split import batch_size

__all__ = ["batch_maker", "fit"]

# the planner's names for torch's optimizer classes (it varies their implementation itself)
_NAMES: tuple[tuple[type[torch.optim.Optimizer], str], ...] = (
    (torch.optim.AdamW, "adamw"),
    (torch.optim.Adam, "adam"),
    (torch.optim.SGD, "sgd"),
)


def _resize(value: Any, index: torch.Tensor) -> Any:
    if isinstance(value, torch.Tensor):
        if value.dim() == 0:
            return value.detach().to("cpu", copy=True)
        return value.detach().to("cpu").index_select(0, index % value.shape[0])
    if isinstance(value, Mapping):
        items = {k: _resize(v, index) for k, v in value.items()}
        return items if isinstance(value, dict) else _rebuilt(value, items)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_resize(v, index) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(_resize(v, index) for v in value)
    return value


def _rebuilt(template: Any, items: dict[Any, Any]) -> Any:
    try:
        return type(template)(items)
    except TypeError:
        return items


def batch_maker(example: Any) -> Callable[[int], Any]:
    """``batch_of(n)``: a batch of ``n`` samples made from ``example`` (its rows repeated, or
    the first ``n`` of them), new CPU tensors of the same dtypes and shapes past dim 0."""
    batch_size(example)  # refuses, now, a batch with no batch dimension or uneven tensors

    def batch_of(n: int) -> Any:
        if type(n) is not int or n < 1:
            raise InvalidInputError(f"batch_of({n!r}): give a batch size as a whole number >= 1.")
        return _resize(example, torch.arange(n))

    return batch_of


def _optimizer_name(optimizer: torch.optim.Optimizer) -> str | None:
    """The planner's name for the optimizer's class (it varies the implementation itself);
    ``None`` for another class (the planner's default then, and apply says so)."""
    return next((name for cls, name in _NAMES if type(optimizer) is cls), None)


def fit(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: LossFn | None = None,
    *,
    budget: str | GPU | None = None,
    batch: Any,
    gpu: str | GPU | None = None,
    before_step: Callable[[], object] | None = None,
    **plan_options: Any,
) -> PlannedStep:
    """Plan the fastest step of ``model`` that fits the GPU, apply it, return the step.

    ``batch`` is an example batch (a tensor, or a dict, tuple or list of them, samples along
    dim 0); the plan keeps ``global_batch`` samples per optimizer step (a plan option; default:
    the example's size) by micro-batches and accumulation. ``gpu`` is the GPU memory to fit, a
    GPU name (``"h100"``) or a size (``"24GiB"``); ``budget`` takes the same (give one of
    them). Both together: the kind of GPU ``gpu`` names (its speed ranks the candidates) in
    ``budget`` of its memory, e.g. ``gpu="a100-40g", budget="20GiB"``. ``plan_options`` (e.g.
    ``margin=``, ``precisions=``, ``seq_len=``) go to :func:`memfit.plan`; the optimizer's class is
    planned for unless ``optimizer=`` is given.
    Refuses, as :func:`memfit.apply` does, a budget nothing fits (the error names the smallest
    configuration and how far over it is).
    ``memfit.unapply(model, optimizer)`` takes the plan off again.
    """
    from memfit.planner import plan as make_plan
    from memfit.planner import plan_target

    check_parts(model, optimizer, loss_fn, None)
    refuse_sharded(model, "memfit.fit")
    target = plan_target(budget, gpu)  # before the batch is looked at: the cheaper check
    if batch is None:
        raise InvalidInputError(
            "memfit.fit needs an example batch to plan with: fit(model, optimizer, loss_fn, "
            'gpu="24GiB", batch=next(iter(loader))).'
        )
    batch_of = batch_maker(batch)
    options: dict[str, Any] = dict(plan_options)
    global_batch = options.pop("global_batch", None)
    if global_batch is None:
        global_batch = batch_size(batch)
    name = _optimizer_name(optimizer)
    if name is not None and options.get("optimizer") is None:  # None: not given
        options["optimizer"] = name
    # the planner makes its micro-batches with batch_of
    options.update(batch_of=batch_of, loss_fn=loss_fn, global_batch=global_batch)
    plan = make_plan(model, budget=target, **options)
    return apply(model, optimizer, plan, loss_fn=loss_fn, before_step=before_step)
