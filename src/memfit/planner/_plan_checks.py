"""What :func:`memfit.planner.plan` checks before it searches: the budget and margin, the
workers, that the workload can be planned at all, and the user's own configuration as the
baseline candidate every plan is held against."""

from __future__ import annotations

from typing import Any

from memfit._errors import InvalidInputError, UnsupportedWorkloadError
from memfit._gpus import GPU
from memfit.planner._parallel import default_workers
from memfit.planner._plan_result import Candidate
from memfit.planner._target import plan_target
from memfit.planner._variant_search import accumulates
from memfit.workload import Workload

__all__ = ["baseline_candidate", "check_plannable", "check_workers", "plan_budget"]


def plan_budget(budget: Any, gpu: Any, margin: float) -> tuple[GPU, int]:
    """The GPU to plan for and the bytes of it a plan may use (all but the margin)."""
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 <= margin < 0.5:
        raise InvalidInputError(
            f"margin={margin!r} is not a share of the budget between 0 and 0.5: give e.g. "
            f"margin=0.05 (5% kept free, the default)."
        )
    # refuses neither, a pair that says nothing more than one, and what resolve_gpu refuses
    # (sizes below the CUDA context, bare numbers, typos)
    target = plan_target(budget, gpu)
    return target, int(target.total * (1 - margin))


def check_workers(workers: Any) -> None:
    if workers is None:
        return
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InvalidInputError(
            f"workers={workers!r} is not a number of processes: give a whole number >= 1 "
            f"(1 traces in this process), or leave it out for {default_workers()} "
            "(this machine's cores, at most 4)."
        )


def check_plannable(base: Workload) -> None:
    if base.mode != "train":
        raise InvalidInputError(
            "plan chooses a training configuration (micro-batch, accumulation, precision, "
            "checkpointing, optimizer); this workload is inference (mode='infer'). Estimate it "
            "with memfit.estimate, or plan with mode='train'."
        )
    if base.step_fn is not None:
        raise UnsupportedWorkloadError(
            "plan changes the step memfit runs (its micro-batches, autocast, checkpointing and "
            "optimizer); a step function of your own is run as written, so none of these can be "
            "changed. Give loss_fn=... instead of step_fn, or estimate the step as it is."
        )
    if not isinstance(base.optimizer, str):
        raise InvalidInputError(
            "plan searches over optimizer variants by name; an optimizer factory cannot be "
            "varied. Give optimizer='adamw' (or 'adam', 'sgd')."
        )
    if base.batch_of is None:
        raise InvalidInputError(
            "plan tries micro-batches of several sizes, and this workload's batch is fixed: "
            "give a model name with batch_size=..., or make_batch as a function of the batch "
            "size (batch=lambda n: ...)."
        )


def baseline_candidate(base: Workload, total: int) -> Candidate:
    micro = base.batch_size or total
    if not accumulates(base.optimizer) and micro != total:
        raise InvalidInputError(
            f"optimizer={base.optimizer!r} cannot accumulate: give "
            f"batch_size={total} (the global batch), or an optimizer that steps after backward "
            f"(optimizer='{str(base.optimizer).partition('-')[0]}') to plan accumulation."
        )
    if total % micro:
        raise InvalidInputError(
            f"global_batch={total} is not a multiple of batch_size={micro}: give a global "
            f"batch that the micro-batch divides, e.g. "
            f"global_batch={micro * max(1, total // micro)}."
        )
    return Candidate(
        micro,
        total // micro,
        base.precision,
        base.activation_checkpointing,
        str(base.optimizer),
        base.allocator_text,
        base.activation_memory_budget,
        base.offload,
        base.offload_checkpoints,
        base.techniques,
    )
