"""The workload: what a step is (model, batch, loss, optimizer, precision, mode) and the loop
that runs it, the same on fake tensors for an estimate and on a real GPU for a measurement."""

from memfit.workload._models import ModelRecipe, catalog_entries, resolve_model
from memfit.workload._step import (
    Batch,
    LossFn,
    OptimizerSpec,
    StepHooks,
    Workload,
    call_model,
    default_loss,
    make_optimizer,
    optimizer_for,
    prepare_model,
    run_steps,
    workload_for,
)

__all__ = [
    "Batch",
    "LossFn",
    "ModelRecipe",
    "OptimizerSpec",
    "StepHooks",
    "Workload",
    "call_model",
    "catalog_entries",
    "default_loss",
    "make_optimizer",
    "optimizer_for",
    "prepare_model",
    "resolve_model",
    "run_steps",
    "workload_for",
]
