"""The messages of the guard's unrecoverable errors: what happened, the memory, what to change.

What to change is advice, :mod:`memfit.planner`'s: the measured shares the OOM report ranks its
fixes with, applied to the working set at the failure.
"""

from __future__ import annotations

from memfit.advice import optimizer_step_advice, smaller_step_advice
from memfit.runtime._incident import MemoryFacts, MicrobatchIncident

__all__ = ["optimizer_message", "sharded_message", "too_small_message"]


def _memory(memory: MemoryFacts | None) -> str:
    if memory is None:
        return "Memory figures are not available: the model's parameters are not on a CUDA device."
    return f"Memory at the failure: {memory.text()}."


def too_small_message(incident: MicrobatchIncident, min_microbatch: int, grown: bool) -> str:
    """The error for a micro-batch of the smallest allowed size that still runs out."""
    smallest = incident.microbatch_before
    limit = (
        "the smallest allowed (min_microbatch)"
        if smallest <= min_microbatch and min_microbatch > 1
        else "a single sample"
        if smallest == 1
        else "as small as this batch can be split"
    )
    where = "" if incident.here else " on another rank"
    memory = incident.memory
    return (
        f"A batch of {incident.batch_size} samples does not fit even as micro-batches of "
        f"{smallest} ({limit}): CUDA ran out of memory in the {incident.phase}{where} at step "
        f"{incident.step}. {_memory(memory)} Splitting cannot go further; what would make it "
        f"fit: {smaller_step_advice(None if memory is None else memory.working_set)}"
        + ("" if min_microbatch <= 1 else f", and min_microbatch={min_microbatch} can be lowered")
        + ". The gradients of the failed step were cleared and the parameters are unchanged; "
        "the guard can go on with the next batch"
        + (" (it also stopped growing micro-batches back)." if grown else ".")
    )


def sharded_message(incident: MicrobatchIncident, parts: int, first: bool) -> str:
    """The error for an out-of-memory error inside an FSDP2 step (never retried)."""
    if first:
        how = "whole" if parts == 1 else f"in {parts} micro-batches (microbatch_size)"
        why = f"This was the first step, with nothing measured yet: it ran {how}"
    else:
        many = f"{parts} micro-batch" + ("es" if parts > 1 else "")
        why = (
            f"The guard had split this batch into {many} from the memory it measured in "
            "earlier steps; this step took more than those bounded"
        )
    return (
        f"CUDA ran out of memory in the {incident.phase} at step {incident.step} on this rank "
        f"of an FSDP2 job (a batch of {incident.batch_size} samples, micro-batches of at most "
        f"{incident.microbatch_before}). {_memory(incident.memory)} Under FSDP2 the guard "
        "cannot retry: the other ranks wait in an all-gather or reduce-scatter this rank will "
        f"not join, so the job has to stop. {why}. What to change: start with a smaller "
        "microbatch_size= (memfit.estimate(..., strategy='fsdp2', world_size=N) gives a "
        "micro-batch's peak on each rank), keep more of the GPU free with keep_free=, or give "
        "cost_fn= where memory grows faster than the batch's largest tensor (attention that "
        "keeps its scores grows with the square of the sequence)."
    )


def optimizer_message(incident: MicrobatchIncident, optimizer: str) -> str:
    """The error for an out-of-memory error in the optimizer step."""
    where = "" if incident.here else " of another rank"
    return (
        f"CUDA ran out of memory in the optimizer step{where} at step {incident.step} "
        f"({optimizer}). {_memory(incident.memory)} Splitting the batch cannot help: the "
        "optimizer step's memory does not depend on it. State left behind: the gradients are "
        "cleared, the gradient scaler's step and update were not recorded, and the guard's "
        "micro-batch size is kept; the parameters and the optimizer state may be partly updated "
        "(torch optimizers update tensor by tensor or in groups), so reload the last checkpoint "
        f"before training on. {optimizer_step_advice(optimizer)}"
    )
