"""The workload: what a step is (model, batch, loss, optimizer, precision, mode, allocator
settings, target GPU), checked once into a frozen :class:`Workload`, and the loop that runs it, the
same on fake tensors for an estimate and on a real GPU for a measurement."""

from memfit.workload._build import make_workload
from memfit.workload._checkpoint import (
    blocks_for,
    checkpoint_blocks,
    checkpointing_on,
    chosen_blocks,
    find_blocks,
    unwrap_blocks,
)
from memfit.workload._compiled import (
    COMPILED_NOTE,
    compiled_function,
    compiled_parts,
    compiled_refusal,
    eager_view,
    not_compiled_refusal,
    optimized_module_type,
    whole_model_compiled,
)
from memfit.workload._eight_bit import EIGHT_BIT, eight_bit_available, eight_bit_class
from memfit.workload._fsdp import MetaStreams, propagation_hidden, storage_hooks
from memfit.workload._in_backward import IN_BACKWARD, OptimizerInBackward, in_backward
from memfit.workload._memory_budget import (
    budget_in_effect,
    check_memory_budget,
    compiled_with_budget,
    memory_budget_words,
)
from memfit.workload._models import ModelRecipe, catalog_entries, resolve_model
from memfit.workload._offload import (
    MIN_OFFLOAD_BYTES,
    ActivationOffload,
    OffloadObserver,
    check_offload,
    offload_blocks,
    offloader_of,
)
from memfit.workload._parallel import (
    STRATEGIES,
    check_parallel,
    check_parallelize,
    parallel_group,
    parallel_note,
    parallelize,
)
from memfit.workload._spec import (
    Batch,
    LossFn,
    Mode,
    OptimizerSpec,
    Precision,
    Workload,
    WorkloadOptions,
    partial_fraction,
    valid_checkpointing,
)
from memfit.workload._step import (
    StepHooks,
    call_model,
    cast_inputs,
    default_loss,
    engage,
    make_optimizer,
    optimizer_for,
    optimizers_of,
    prepare_model,
    run_steps,
)
from memfit.workload._zero import ZERO

__all__ = [
    "COMPILED_NOTE",
    "EIGHT_BIT",
    "IN_BACKWARD",
    "MIN_OFFLOAD_BYTES",
    "STRATEGIES",
    "ZERO",
    "ActivationOffload",
    "Batch",
    "LossFn",
    "MetaStreams",
    "Mode",
    "ModelRecipe",
    "OffloadObserver",
    "OptimizerInBackward",
    "OptimizerSpec",
    "Precision",
    "StepHooks",
    "Workload",
    "WorkloadOptions",
    "blocks_for",
    "budget_in_effect",
    "call_model",
    "cast_inputs",
    "catalog_entries",
    "check_memory_budget",
    "check_offload",
    "check_parallel",
    "check_parallelize",
    "checkpoint_blocks",
    "checkpointing_on",
    "chosen_blocks",
    "compiled_function",
    "compiled_parts",
    "compiled_refusal",
    "compiled_with_budget",
    "default_loss",
    "eager_view",
    "eight_bit_available",
    "eight_bit_class",
    "engage",
    "find_blocks",
    "in_backward",
    "make_optimizer",
    "make_workload",
    "memory_budget_words",
    "not_compiled_refusal",
    "offload_blocks",
    "offloader_of",
    "optimized_module_type",
    "optimizer_for",
    "optimizers_of",
    "parallel_group",
    "parallel_note",
    "parallelize",
    "partial_fraction",
    "prepare_model",
    "propagation_hidden",
    "resolve_model",
    "run_steps",
    "storage_hooks",
    "unwrap_blocks",
    "valid_checkpointing",
    "whole_model_compiled",
]
