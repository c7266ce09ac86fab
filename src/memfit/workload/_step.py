"""The step loop that runs a workload: input, forward (+loss), backward, optimizer, zero_grad.

The same loop runs on fake tensors for an estimate and on a real GPU for validation, so the two
see the same program. Only the device, the autocast and the grad scaler are passed in.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_unflatten

from memfit._errors import InvalidInputError
from memfit.technique import Place, active_techniques, optimizer_variant_of
from memfit.technique.data_parallel import ZERO, engage_zero, parallelize, zero_config
from memfit.workload._first_imports import imports_outside_modes
from memfit.workload._spec import Batch, OptimizerSpec, Workload

__all__ = [
    "StepHooks",
    "call_model",
    "default_loss",
    "make_optimizer",
    "optimizer_for",
    "optimizers_of",
    "prepare_model",
    "run_steps",
]


def make_optimizer(spec: OptimizerSpec, params: Any) -> torch.optim.Optimizer:
    """An optimizer from a name (``adamw``, ``adamw-fused``...) or a factory."""
    if not isinstance(spec, str):
        return spec(params)
    variant = optimizer_variant_of(spec)  # in backward, 8-bit states: the technique's hooks
    made: torch.optim.Optimizer | None = variant.make_optimizer(spec, params) if variant else None
    if made is not None:
        return made
    name, _, impl = spec.partition("-")
    flags: dict[str, Any] = dict(variant.optimizer_flags(spec)) if variant else {}
    if impl == "fused":
        flags["fused"] = True
    elif impl == "foreach":
        flags["foreach"] = True
    elif impl == "forloop":  # one parameter at a time: the fewest temporaries, the slowest
        flags["foreach"] = False
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, **flags)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-4, **flags)
    return torch.optim.AdamW(params, lr=1e-4, **flags)


def call_model(model: nn.Module, batch: Batch) -> Any:
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    return model(batch)


def default_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """``.loss`` of the output if it has one, else the output (summed if not a scalar)."""
    out = call_model(model, batch)
    loss = getattr(out, "loss", None)
    if loss is None and isinstance(out, dict):
        loss = out.get("loss")
    if loss is None:
        loss = out[0] if isinstance(out, (tuple, list)) else out
    if not isinstance(loss, torch.Tensor):
        raise InvalidInputError(
            "The model's output has no tensor loss; pass loss_fn=lambda model, batch: ..."
        )
    return loss if loss.dim() == 0 else loss.float().sum()


@dataclass
class StepHooks:
    """What differs between a real run and a trace."""

    to_device: Callable[[Batch], Batch]
    autocast: Callable[[torch.dtype], AbstractContextManager[Any]]
    grad_scaler: Callable[[], Any] | None = None
    phase: Callable[[str], None] = lambda name: None
    after_backward: Callable[[nn.Module], None] = lambda model: None
    after_optimizer: Callable[[torch.optim.Optimizer], None] = lambda opt: None
    # wraps one parameter's update when the optimizer steps in backward (the trace's marks)
    around_param_step: Callable[[Any, Any, Callable[[], None]], None] = (
        lambda param, optimizer, update: update()
    )
    # True when step N's input, forward and backward were reproduced without running them
    # (a trace copies step 1's events; memfit's own loop only)
    repeat: Callable[[int, nn.Module], bool] = lambda step, model: False
    # True when step N's next ``count`` micro-batches were reproduced from its second (a trace)
    repeat_micro_batches: Callable[[int, int], bool] = lambda step, count: False
    # with ``batch_held``: the micro-batch as views of the batch the caller holds on the GPU,
    # which takes no new memory (``None``: moved like any other, ``to_device``)
    held_view: Callable[[Batch], Batch] | None = None


def run_steps(
    workload: Workload, model: nn.Module, optimizer: torch.optim.Optimizer | None, hooks: StepHooks
) -> None:
    """Run the workload's steps: input, forward (+loss) and backward for each micro-batch,
    then optimizer and zero_grad."""
    dtype = workload.autocast_dtype
    scaler = (
        hooks.grad_scaler() if workload.precision == "fp16-mixed" and hooks.grad_scaler else None
    )

    def region() -> AbstractContextManager[Any]:
        return hooks.autocast(dtype) if dtype is not None else nullcontext()

    whole = workload.step_fn is not None or workload.mode == "infer"  # no optimizer of ours
    with ExitStack() as stepping:  # a technique that steps parameters itself (in backward)
        if not whole:
            for technique, value in active_techniques(workload):
                around = hooks.around_param_step
                stepping.enter_context(technique.stepping(value, optimizer, around))
        _steps(workload, model, optimizer, hooks, scaler, whole, region)
    hooks.phase("end")


def _steps(
    workload: Workload,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    hooks: StepHooks,
    scaler: Any,
    whole: bool,
    region: Callable[[], AbstractContextManager[Any]],
) -> None:
    for step in range(1, workload.steps + 1):
        repeated = hooks.repeat(step, model)  # input, forward and backward copied from step 1
        micro_batches = 0 if repeated else 1 if whole else workload.accumulation
        for index in range(micro_batches):
            if index >= 2 and hooks.repeat_micro_batches(step, micro_batches - index):
                break  # the rest copied from the second
            hooks.phase(f"step{step}.input")
            made = workload.make_batch()
            if made is None:
                raise InvalidInputError(
                    f"make_batch returned None for {workload.name}: the batch factory must "
                    "return the batch (a tensor, tuple or dict); is a 'return' missing?"
                )
            if workload.batch_held and hooks.held_view is not None:
                # a slice of the caller's batch, cast (a copy) only for pure low precision, as
                # memfit.apply's step casts each micro-batch it cuts from the batch it is given
                batch = cast_inputs(hooks.held_view(made), workload.param_dtype)
            else:
                batch = hooks.to_device(cast_inputs(made, workload.param_dtype))
            hooks.phase(f"step{step}.forward")
            if workload.step_fn is not None:
                _run_user_step(workload, model, batch, optimizer, hooks)
                del batch
            elif workload.mode == "infer":
                with torch.no_grad(), region():
                    out = (workload.forward_fn or call_model)(model, batch)
                del out, batch
            else:
                with region():
                    loss = workload.loss_fn(model, batch)
                del batch
                hooks.phase(f"step{step}.backward")
                if workload.strategy in ZERO:  # DeepSpeed's engine scales for accumulation
                    model.backward(loss)  # type: ignore[operator]
                    if index < micro_batches - 1:
                        model.step()  # type: ignore[operator]  # a micro-step: no update
                    del loss
                    continue
                if workload.accumulation > 1:  # the mean over the micro-batches, as users write
                    loss = loss / workload.accumulation
                (scaler.scale(loss) if scaler is not None else loss).backward()
                del loss
        if whole:
            continue
        hooks.after_backward(model)
        assert optimizer is not None
        engine = model if workload.strategy in ZERO else None
        _optimizer_step(optimizer, scaler, hooks, step, engine)


def engage(
    workload: Workload, model: nn.Module, optimizer: Any, place: Place
) -> tuple[nn.Module, Any]:
    """The model and optimizer a step runs: DeepSpeed's engine and ZeRO optimizer over them for
    a ZeRO strategy (``memfit.technique.data_parallel``), each technique's engaged
    (``memfit.technique``, its host tensors in ``place``), else as they are."""
    if workload.strategy in ZERO:
        config = zero_config(
            workload.strategy, workload.precision, workload.batch_size or 1, workload.accumulation
        )
        model, optimizer = engage_zero(model, optimizer, config)
    for technique, value in active_techniques(workload):
        optimizer = technique.engage(value, model, optimizer, place)
    return model, optimizer


def _optimizer_step(
    optimizer: torch.optim.Optimizer,
    scaler: Any,
    hooks: StepHooks,
    step: int,
    engine: Any = None,
) -> None:
    hooks.phase(f"step{step}.optimizer")
    if engine is not None:  # DeepSpeed steps and clears the gradients itself
        engine.step()
        hooks.after_optimizer(optimizer)
        hooks.phase(f"step{step}.zero_grad")
        return
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:  # stepped in backward: every gradient is None and this steps nothing
        optimizer.step()
    hooks.after_optimizer(optimizer)
    hooks.phase(f"step{step}.zero_grad")
    optimizer.zero_grad(set_to_none=True)


def _run_user_step(
    workload: Workload, model: nn.Module, batch: Batch, optimizer: Any, hooks: StepHooks
) -> None:
    """The user's whole step, as written: their autocast, scaler, backward and optimizer
    calls are theirs (a trace sees them through hooks on autograd and torch.optim)."""
    assert workload.step_fn is not None
    if workload.mode == "infer":
        out = workload.step_fn(model, batch)
        del out
        return
    workload.step_fn(model, batch, optimizer)


def held_batch_sizes(workload: Workload) -> list[int]:
    """With ``batch_held``: the bytes of each tensor of the whole batch the caller holds on the
    GPU through a step (each of a micro-batch's tensors, as ``make_batch`` makes them, times
    the micro-batches of a step: the batch that is split into them); else nothing. The
    caller's dtypes: a pure low-precision step casts each micro-batch as it runs."""
    if not workload.batch_held:
        return []
    leaves = [t for t in tree_flatten(workload.make_batch())[0] if isinstance(t, torch.Tensor)]
    parts = workload.held_micro_batches or workload.accumulation
    return [t.numel() * t.element_size() * parts for t in leaves if t.numel()]


def held_view_on(workload: Workload, device: torch.device | str) -> Callable[[Batch], Batch] | None:
    """With ``batch_held``: a real run's ``held_view``, which hands out the micro-batches of
    :func:`held_batch_on` in turn (and holds them while it lives); else None."""
    parts = held_batch_on(workload, device)
    if not parts:
        return None
    turn = itertools.count()
    return lambda batch: parts[next(turn) % len(parts)]


def held_batch_on(workload: Workload, device: torch.device | str) -> list[Batch]:
    """With ``batch_held``: a step's micro-batches as views of one batch on ``device``, a
    tensor per leaf as a caller's batch is (the bytes :func:`held_batch_sizes` counts); else
    nothing."""
    if not workload.batch_held:
        return []
    parts = workload.held_micro_batches or workload.accumulation
    made = [tree_flatten(workload.make_batch()) for _ in range(parts)]
    spec = made[0][1]
    columns = []
    for position, first in enumerate(made[0][0]):
        pieces = [leaves[position] for leaves, _ in made]
        if isinstance(first, torch.Tensor) and first.dim() > 0:
            whole = torch.cat(pieces).to(device)
            columns.append(list(whole.split([p.shape[0] for p in pieces])))
        elif isinstance(first, torch.Tensor):  # a scalar: one per micro-batch
            columns.append([p.to(device) for p in pieces])
        else:
            columns.append(pieces)
    return [tree_unflatten([c[i] for c in columns], spec) for i in range(parts)]


def cast_inputs(batch: Batch, dtype: torch.dtype) -> Batch:
    """Pure low precision: floating inputs take the parameters' dtype (integer ids do not)."""
    if dtype == torch.float32:
        return batch

    def cast(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            return t.to(dtype)
        return t

    if isinstance(batch, dict):
        return {k: cast(v) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(cast(v) for v in batch)
    return cast(batch)


def prepare_model(
    workload: Workload,
    build_device: torch.device | str,
    building: AbstractContextManager[Any] | None = None,
) -> nn.Module:
    """Build on ``build_device``, cast for pure low precision, set train/eval, then the
    techniques' changes;
    the build and the cast run inside ``building`` (a trace's model that FSDP2 shards is built
    off the GPU)."""
    # a library the constructor imports makes its module's tensors as it would anywhere else
    with building or nullcontext(), torch.device(build_device), imports_outside_modes():
        model = workload.build_model()
        if building is None:  # a model built off the GPU (FSDP2) is moved by its wrapping
            _move_strays(model, torch.device(build_device))
        if workload.param_dtype != torch.float32:
            model = model.to(workload.param_dtype)
        model.train(workload.mode == "train")
        # the techniques' changes to the model (its blocks' recompute switched on, PEFT's adapters,
        # the blocks' wrapping that copies what they save to the host) as a script makes them,
        # once the model is built
        for technique, value in active_techniques(workload):
            model = technique.prepare(value, model, workload)
    for p in model.parameters():
        if workload.mode == "infer":
            p.requires_grad_(False)
    if workload.strategy is not None:  # last, as a training script wraps: inside a group
        model = parallelize(
            model,
            workload.strategy,
            torch.device(build_device).type,
            workload.mixed_dtype,
            workload.parallelize,
            workload.offload_shards,
        )
    return model


def _move_strays(model: nn.Module, device: torch.device) -> None:
    """Move to ``device`` the parameters and buffers a constructor left on the CPU, as the
    user's ``model.to(device)`` does. A legacy constructor (``nn.Parameter(torch.Tensor(n))``,
    as ImageGPT, XLNet and wav2vec2's ``masked_spec_embed`` write theirs) ignores the device
    the model is built under."""
    if device.type == "cpu":
        return
    tensors = [*model.parameters(), *model.buffers()]
    if any(t.device.type == "cpu" for t in tensors):
        model.to(device)


def optimizer_for(workload: Workload, model: nn.Module) -> Any:
    """The step's optimizer; None in inference. With a step function, a factory is given the
    model and may return several optimizers (a tuple, list or dict of them, e.g. a GAN's)."""
    if workload.mode == "infer":
        return None
    if workload.step_fn is not None and not isinstance(workload.optimizer, str):
        made = workload.optimizer(model)
        if not all(isinstance(o, torch.optim.Optimizer) for o in optimizers_of(made)):
            raise InvalidInputError(
                f"The optimizer factory returned {made!r}: with a step function it is given "
                "the model and must return a torch.optim.Optimizer, or a tuple, list or dict "
                "of them (e.g. lambda model: (Adam(model.g.parameters()), "
                "Adam(model.d.parameters())))."
            )
        return made
    return make_optimizer(workload.optimizer, [p for p in model.parameters() if p.requires_grad])


def optimizers_of(optimizer: Any) -> list[Any]:
    """The optimizers in what :func:`optimizer_for` returned (one, a sequence or a dict)."""
    if optimizer is None:
        return []
    if isinstance(optimizer, dict):
        return list(optimizer.values())
    if isinstance(optimizer, (tuple, list)):
        return list(optimizer)
    return [optimizer]
