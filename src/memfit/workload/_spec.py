"""The workload spec: every setting that decides the memory of a step, parsed and validated once.

:func:`memfit.workload.make_workload` builds it from the keyword arguments users give
``memfit.estimate``, ``memfit.find_batch_size`` and ``memfit.validate`` (or from the command
line's flags); everything below takes the spec and never parses a setting again.

Adding a setting means: a field here (with its check in ``__post_init__``), its keyword in
:class:`WorkloadOptions` and its translation in :func:`memfit.workload.make_workload`, and the
code that uses it. Settings still to come (a user's step function, world size and sharding,
offload) are fields of the same kind: the spec is passed whole, so nothing between the front and
the code that reads a field changes.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, cast

import torch
from torch import nn

from memfit._choices import MODES, MOE_ROUTINGS, OPTIMIZERS, PRECISIONS
from memfit._errors import InvalidInputError
from memfit._gpus import GPU
from memfit.allocator import AllocatorConfig
from memfit.technique import active_techniques, checked_techniques
from memfit.technique.compilation import check_compiled_setting, check_memory_budget
from memfit.technique.data_parallel import (
    CASTS_ITSELF,
    check_offload_shards,
    check_parallel,
    check_parallelize,
    check_sharded_optimizer,
)
from memfit.technique.in_backward import in_backward
from memfit.technique.offload import check_offload

__all__ = [
    "Batch",
    "LossFn",
    "Mode",
    "OptimizerSpec",
    "Precision",
    "StepFn",
    "Workload",
    "WorkloadOptions",
    "check_choice",
    "check_count",
    "check_moe_routing",
    "given_options",
    "partial_fraction",
    "valid_checkpointing",
]

Batch = Any
LossFn = Callable[[nn.Module, Batch], torch.Tensor]
OptimizerSpec = str | Callable[[Any], torch.optim.Optimizer]
Precision = Literal["fp32", "bf16", "fp16", "bf16-mixed", "fp16-mixed"]
Mode = Literal["train", "infer"]
# one whole iteration: step(model, batch, optimizer) in training, step(model, batch) in inference
StepFn = Callable[..., Any]


class WorkloadOptions(TypedDict, total=False):
    """The keyword arguments that describe a workload, shared by every entry point."""

    loss_fn: LossFn | None
    step_fn: StepFn | None
    optimizer: OptimizerSpec | None  # None: adamw in training, none in inference
    precision: str
    mode: str
    activation_checkpointing: bool | str | float  # True, False, "selective" or a fraction
    allocator_config: str | None
    gpu: GPU | str | None  # a name or a size with a unit; a bare number is refused
    batch_size: int | None
    seq_len: int | None
    steps: int | None
    # micro-batches of batch_size whose gradients add up before each optimizer step (train)
    accumulation: int | None
    compiled: str | None  # "eager": a torch.compile'd model estimated uncompiled
    moe_routing: str | None  # "loaded" (default), "balanced" or "skewed": memfit.trace._routing
    # torch.compile's activation memory budget (a share 0..1) for a compiled model's step
    activation_memory_budget: float | None
    # the share of the blocks whose saved activations go to pinned host memory (True: all)
    offload: bool | float | None
    # the inputs of the blocks memfit checkpoints go to pinned host memory too
    offload_checkpoints: bool | None
    world_size: int | None  # ranks of a data-parallel job (with strategy)
    strategy: str | None  # "ddp" or "fsdp2": memfit.technique.data_parallel
    # FSDP2's CPU offload: each rank's shards (parameters, gradients, optimizer states) on the host
    offload_shards: bool | None
    # the step's caller holds its whole batch on the GPU through the step (a training loop's
    # batch variable): counted beside what the step makes
    batch_held: bool | None
    # the user's own wrapping, fn(model, mesh) -> model, in place of the strategy's default
    parallelize: Callable[[nn.Module, Any], nn.Module] | None
    # the techniques of memfit.technique by name, each with its value: {"host_optimizer": True}
    techniques: Mapping[str, Any] | None
    # a technique's alias keyword (memfit.technique's Option.aliases): PEFT's configuration
    peft_config: Any


# the settings whose default is a value of their own ("fp32", "train", False): None is not one
# of their values, so it is refused as a mistake; for every other setting None is "not given"
_VALUE_DEFAULTS = frozenset({"precision", "mode", "activation_checkpointing"})


def given_options(options: WorkloadOptions) -> WorkloadOptions:
    """``options`` without the settings given as ``None``, which means "not given" (the
    default) for every setting but ``precision``, ``mode`` and ``activation_checkpointing``:
    ``optimizer=None, mode="infer"`` is an inference step, as if ``optimizer`` were left
    out, so that a caller can pass its own optional arguments through unchanged."""
    given = {k: v for k, v in options.items() if v is not None or k in _VALUE_DEFAULTS}
    return cast(WorkloadOptions, given)


@dataclass(frozen=True)
class Workload:
    """Everything that decides the memory of a step, already validated.

    ``make_batch`` makes the batch the step runs on; ``batch_of(n)``, where known, makes one of
    ``n`` samples (:meth:`with_batch_size` uses it). ``batch_size`` and ``seq_len`` are as the
    user gave them (``None``: the batch, or the model's default length, decides).
    """

    build_model: Callable[[], nn.Module]
    make_batch: Callable[[], Batch]
    loss_fn: LossFn
    optimizer: OptimizerSpec = "adamw"
    precision: Precision = "fp32"
    mode: Mode = "train"
    # "selective" or a fraction of the blocks (0 < f < 1): memfit.technique.checkpointing
    activation_checkpointing: bool | str | float = False
    enable_checkpointing: Callable[[nn.Module], None] | None = None
    steps: int = 2
    accumulation: int = 1  # micro-batches (each of batch_size) per optimizer step
    forward_fn: Callable[[nn.Module, Batch], Any] | None = None  # inference; default call_model
    # the user's whole step, run as written (then loss_fn and forward_fn are not used)
    step_fn: StepFn | None = None
    name: str = "model"
    batch_size: int | None = None
    seq_len: int | None = None
    batch_of: Callable[[int], Batch] | None = None
    allocator: AllocatorConfig = field(default_factory=AllocatorConfig)
    allocator_text: str = ""  # the PYTORCH_CUDA_ALLOC_CONF text as given, for reports
    gpu: GPU | None = None  # the target, where the user named one
    compiled: Literal["eager"] | None = None  # torch.compile'd parts: None refuses them
    # mixture-of-experts routing: "loaded" (experts get 0.75-1.25 times an even share),
    # "balanced" (each gets tokens*top_k/experts) or "skewed" (every token to the same top_k
    # experts, the worst case); None: loaded, not asked for
    moe_routing: str | None = None
    # a compiled model's activation memory budget (technique.compilation); None: the process's
    activation_memory_budget: float | None = None
    # the share of the blocks (not checkpointed) whose saved tensors wait in pinned host memory
    # between forward and backward (memfit.technique.offload); True is read as 1.0, False as 0.0
    offload: float = 0.0
    # the inputs checkpointed blocks keep for their recompute wait in pinned host memory too
    # (DeepSpeed's cpu_checkpointing): below full checkpointing's memory (memfit.technique.offload)
    offload_checkpoints: bool = False
    world_size: int = 1  # ranks of a data-parallel job, each estimated (technique.data_parallel)
    strategy: str | None = None  # "ddp", "fsdp2", or None: one process, no wrapper
    # FSDP2's CPUOffloadPolicy: each rank's shards and the optimizer step on the host
    offload_shards: bool = False
    # the caller holds the whole batch (every micro-batch of a step) on the GPU through the
    # step, as a loop that moves its batch to the GPU and then calls the step does; False: the
    # step makes each micro-batch's inputs and lets them go after its forward (memfit's loop)
    batch_held: bool = False
    # with batch_held: the micro-batches the held batch is made of (0: ``accumulation``); a
    # trace that runs fewer micro-batches than the step has (the planner's) keeps the step's
    held_micro_batches: int = 0
    # fn(model, mesh) -> model: the user's own DDP or fully_shard calls (technique.data_parallel)
    parallelize: Callable[[nn.Module, Any], nn.Module] | None = None

    # memfit.technique's techniques asked for, (name, value) sorted by name, none at its default
    techniques: tuple[tuple[str, Any], ...] = ()

    notes: tuple[str, ...] = ()  # what was assumed or warned while building, for the estimate

    def __post_init__(self) -> None:
        for what in ("precision", "mode"):
            if not isinstance(getattr(self, what), str):
                raise InvalidInputError(
                    f"{what}={getattr(self, what)!r} is not a string: give one of "
                    f"{', '.join(PRECISIONS if what == 'precision' else MODES)}."
                )
        check_choice("precision", self.precision, PRECISIONS)
        check_choice("mode", self.mode, MODES)
        if isinstance(self.optimizer, str):
            check_choice("optimizer", self.optimizer, OPTIMIZERS)
        elif not callable(self.optimizer):
            raise InvalidInputError(
                f"optimizer={self.optimizer!r} is neither a name nor a factory: give one of "
                f"{', '.join(OPTIMIZERS)}, or a function of the parameters that returns a "
                "torch.optim.Optimizer."
            )
        if not valid_checkpointing(self.activation_checkpointing):
            raise InvalidInputError(
                f"activation_checkpointing={self.activation_checkpointing!r} is not a bool, "
                "'selective' or a fraction: give True (the model's own checkpointing of every "
                "block), 'selective' (matrix products and attention kept, the rest recomputed), "
                "a fraction between 0 and 1 such as 0.5 (that share of the blocks "
                "checkpointed in full) or False."
            )
        for what in ("loss_fn", "build_model", "make_batch"):
            if not callable(getattr(self, what)):
                raise InvalidInputError(
                    f"{what}={getattr(self, what)!r} is not callable: give a function"
                    + (
                        " of (model, batch) that returns the loss tensor."
                        if what == "loss_fn"
                        else "."
                    )
                )
        _check_takes_two("loss_fn", self.loss_fn)
        if self.step_fn is not None:
            _check_step_fn(self.step_fn, self.mode)
        check_count("steps", self.steps)
        check_count("accumulation", self.accumulation)
        check_compiled_setting(self.compiled)
        check_memory_budget(self.activation_memory_budget)
        if isinstance(self.offload, bool) or check_offload(self.offload) != self.offload:
            raise InvalidInputError(
                f"offload={self.offload!r} is not a share of blocks as a number: give 1.0 (every "
                "block's saved activations to pinned host memory), a fraction such as 0.5 or "
                "0.0 (make_workload and estimate read True and False too)."
            )
        for what in ("offload_shards", "batch_held", "offload_checkpoints"):
            _check_flag(what, getattr(self, what))
        check_parallel(self.world_size, self.strategy, self.mode, self.precision)
        check_parallelize(self.parallelize, self.strategy)
        check_offload_shards(self.offload_shards, self.strategy, self.optimizer)
        check_sharded_optimizer(self.strategy, self.optimizer)
        if self.moe_routing is not None:
            check_moe_routing(self.moe_routing)
        if self.batch_size is not None:
            check_count("batch_size", self.batch_size)
        if self.seq_len is not None:
            check_count("seq_len", self.seq_len)
        _check_techniques(self)

    @property
    def optimizer_in_backward(self) -> bool:
        """Whether the optimizer steps each parameter in backward (``adamw-in-backward``)."""
        return in_backward(self.optimizer)

    @property
    def param_dtype(self) -> torch.dtype:
        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.precision, torch.float32)

    @property
    def mixed_dtype(self) -> torch.dtype | None:
        """The low precision of a mixed-precision step (its parameters stay float32)."""
        return {"bf16-mixed": torch.bfloat16, "fp16-mixed": torch.float16}.get(self.precision)

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        """The dtype the step's autocast runs in; None under FSDP2, whose mixed-precision
        policy casts the parameters it all-gathers instead, and under ZeRO, whose engine runs the
        model in bfloat16 (both ``memfit.technique.data_parallel``)."""
        return None if self.strategy in CASTS_ITSELF else self.mixed_dtype

    @property
    def batch_text(self) -> str:
        """How the batch reads in a report (``8 x 1024 tokens``); empty when the traced inputs
        tell it better (an image batch reads ``64 x 3 x 224 x 224`` from its first input)."""
        if self.batch_size is None or not self.seq_len:
            return ""
        return f"{self.batch_size} x {self.seq_len} tokens"

    def with_batch_size(self, batch_size: int) -> Workload:
        """The same workload on a batch of ``batch_size`` samples (the batch-size search)."""
        if self.batch_of is None:
            raise InvalidInputError(
                "This workload's batch is fixed: give a function of the batch size that makes "
                "one (make_batch=lambda n: ...) or a model name to search over batch sizes."
            )
        batch_of = self.batch_of
        return dataclasses.replace(
            self, batch_size=batch_size, make_batch=lambda: batch_of(batch_size)
        )


_FLAG_HINTS = {
    "batch_held": "True when your loop holds the whole batch on the GPU while the step runs "
    "(it moved the batch there first), or False",
    "offload_shards": "True for FSDP2's CPU offload of each rank's shards, or False",
    "offload_checkpoints": "True to keep checkpointed blocks' inputs in pinned host memory, "
    "or False",
}


def _check_techniques(workload: Workload) -> None:
    """The techniques as :func:`~memfit.technique.checked_techniques` keeps them, each one
    going with the other settings."""
    given = workload.techniques
    if not isinstance(given, tuple) or checked_techniques(dict(given)) != given:
        raise InvalidInputError(
            f"techniques={given!r} is not a sorted tuple of (name, value) pairs: give "
            "techniques= to make_workload as a dict, e.g. {'host_optimizer': True}."
        )
    for technique, value in active_techniques(workload):
        refusal = technique.refusal(value, workload)
        if refusal is not None:
            raise InvalidInputError(refusal)


def _check_flag(what: str, value: object) -> None:
    if not isinstance(value, bool):
        raise InvalidInputError(f"{what}={value!r} is not True or False: give {_FLAG_HINTS[what]}.")


def _check_takes_two(what: str, fn: Callable[..., Any]) -> None:
    """``fn`` can be called as ``fn(model, batch)`` (where Python can tell)."""
    try:
        inspect.signature(fn).bind(None, None)
    except TypeError:
        raise InvalidInputError(
            f"{what}={getattr(fn, '__qualname__', fn)} cannot be called as {what}(model, "
            f"batch): give a function of two arguments, e.g. {what}=lambda model, batch: "
            "model(batch).sum()."
        ) from None
    except ValueError:
        pass  # no signature (a builtin): it is called and fails there if it must


def _check_step_fn(fn: object, mode: str) -> None:
    """``fn`` is callable with the arguments of a step in ``mode``."""
    example = (
        "def step(model, batch, optimizer): loss = model(**batch).loss; loss.backward(); "
        "optimizer.step(); optimizer.zero_grad()"
        if mode == "train"
        else "def step(model, batch): return model.generate(**batch, max_new_tokens=128)"
    )
    if not callable(fn):
        raise InvalidInputError(f"step_fn={fn!r} is not callable: give a function, e.g. {example}.")
    name = getattr(fn, "__qualname__", fn)
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # no signature (a builtin): it is called and fails there if it must
    if mode == "train":
        try:
            signature.bind(None, None, None)
        except TypeError:
            two = _binds(signature, 2)
            raise InvalidInputError(
                f"step_fn={name} cannot be called as step_fn(model, batch, optimizer), as a "
                "training step is"
                + (
                    ": it takes (model, batch), an inference step: pass mode='infer'"
                    if two
                    else f": give a function of three arguments, e.g. {example}"
                )
                + "."
            ) from None
    elif not _binds(signature, 2):
        three = _binds(signature, 3)
        raise InvalidInputError(
            f"step_fn={name} cannot be called as step_fn(model, batch), as an inference step "
            "is"
            + (
                ": it takes (model, batch, optimizer), a training step: pass mode='train'"
                if three
                else f": give a function of two arguments, e.g. {example}"
            )
            + "."
        )


def _binds(signature: inspect.Signature, n: int) -> bool:
    try:
        signature.bind(*([None] * n))
    except TypeError:
        return False
    return True


def check_count(what: str, value: object) -> None:
    """``value`` is a whole number of at least 1 (a count of steps, samples or tokens)."""
    if isinstance(value, bool) or not isinstance(value, int):
        hint = f"{what}={int(value)}" if isinstance(value, str) and value.isdigit() else f"{what}=8"
        raise InvalidInputError(
            f"{what}={value!r} is not a whole number: give an int, e.g. {hint}."
        )
    if value < 1:
        raise InvalidInputError(f"{what}={value} must be at least 1.")


def check_moe_routing(value: object) -> None:
    """``value`` names a routing policy (the router answers, see memfit.trace._routing)."""
    if value not in MOE_ROUTINGS:
        raise InvalidInputError(
            f"moe_routing={value!r} is not a routing policy: give 'loaded' (the experts get "
            "0.75 to 1.25 times an even share of the tokens, the default), 'balanced' (each "
            "expert gets tokens*top_k/experts tokens) or 'skewed' (every token to the same "
            "top_k experts, the worst case for memory)."
        )


def check_choice(what: str, value: str, accepted: tuple[str, ...]) -> None:
    if value not in accepted:
        raise InvalidInputError(
            f"{what.capitalize()} {value!r} is not supported. Accepted: {', '.join(accepted)}."
        )


def valid_checkpointing(value: object) -> bool:
    """Whether ``value`` is an ``activation_checkpointing`` setting: a bool, ``"selective"``
    or a fraction strictly between 0 and 1 (partial checkpointing)."""
    if isinstance(value, bool) or value == "selective":
        return True
    return isinstance(value, float) and 0.0 < value < 1.0


def partial_fraction(value: object) -> float | None:
    """The fraction of blocks a partial ``activation_checkpointing`` wraps, else ``None``."""
    return value if isinstance(value, float) else None
