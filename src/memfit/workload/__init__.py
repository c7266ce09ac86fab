"""The workload: what a step is (model, batch, loss, optimizer, precision, mode, allocator
settings, target GPU), checked once into a frozen :class:`Workload`, and the loop that runs it, the
same on fake tensors for an estimate and on a real GPU for a measurement."""

from memfit.workload._build import make_workload
from memfit.workload._models import ModelRecipe, catalog_entries, resolve_model
from memfit.workload._spec import (
    Batch,
    LossFn,
    Mode,
    OptimizerSpec,
    Precision,
    Workload,
    WorkloadOptions,
    given_options,
    partial_fraction,
    valid_checkpointing,
)
from memfit.workload._step import (
    StepHooks,
    call_model,
    cast_inputs,
    default_loss,
    engage,
    held_batch_on,
    held_batch_sizes,
    held_view_on,
    make_optimizer,
    optimizer_for,
    optimizers_of,
    prepare_model,
    run_steps,
)

__all__ = [
    "Batch",
    "LossFn",
    "Mode",
    "ModelRecipe",
    "OptimizerSpec",
    "Precision",
    "StepHooks",
    "Workload",
    "WorkloadOptions",
    "call_model",
    "cast_inputs",
    "catalog_entries",
    "default_loss",
    "engage",
    "given_options",
    "held_batch_on",
    "held_batch_sizes",
    "held_view_on",
    "make_optimizer",
    "make_workload",
    "optimizer_for",
    "optimizers_of",
    "partial_fraction",
    "prepare_model",
    "resolve_model",
    "run_steps",
    "valid_checkpointing",
]
