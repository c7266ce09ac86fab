"""The advice inside the errors other layers raise: what to change when an estimated step does
not fit (``find_batch_size``'s ``DoesNotFitError``) and when the micro-batch guard can split no
further or runs out in the optimizer step (its ``UnrecoverableOOMError``).

They name the changes ``memfit estimate`` can predict, with the measured shares of
:mod:`memfit.planner._factors` where the working set is known.
"""

from __future__ import annotations

from memfit._units import format_bytes
from memfit.planner._factors import CHECKPOINTING, MIXED_PRECISION, Factor

__all__ = ["does_not_fit_message", "optimizer_step_advice", "smaller_step_advice"]


def does_not_fit_message(
    gpu_name: str, batch_size: int, total: int, peak_reserved: int, budget: int
) -> str:
    """The error for a step whose estimate at the smallest batch size, ``total`` bytes with the
    CUDA context, is over ``budget``: the numbers, then the settings that make it smaller."""
    return (
        f"The step does not fit {gpu_name} even at batch size {batch_size}: the estimate is "
        f"{format_bytes(total)} (peak reserved {format_bytes(peak_reserved)} plus "
        f"the CUDA context) against a budget of {format_bytes(budget)}. Make it smaller: "
        "precision='bf16-mixed' or 'bf16', activation_checkpointing=True, a shorter sequence, "
        "an optimizer with less state (sgd, or adamw with bf16 weights), or a larger GPU."
    )


def _saving(working_set: int | None, factor: Factor) -> str:
    share = factor.share
    if working_set is None:
        return f"~{share:.0%} of the activations"
    return f"~{format_bytes(factor.of(working_set))}, {share:.0%} of the working set"


def smaller_step_advice(working_set: int | None) -> str:
    """What would make a step fit that no smaller batch does, with the bytes each saves of
    ``working_set`` (``None`` when unknown: the shares alone); a phrase, no final period."""
    return (
        f"activation checkpointing ({_saving(working_set, CHECKPOINTING)}, "
        f"{CHECKPOINTING.cost}), bf16 mixed precision ({_saving(working_set, MIXED_PRECISION)}), "
        "a shorter sequence or smaller images for this batch, or a smaller or sharded (FSDP) "
        "model; `memfit estimate MODEL --checkpointing` and `--precision bf16-mixed` predict "
        "each before a run"
    )


def optimizer_step_advice(optimizer: str) -> str:
    """What lowers the memory of the step of ``optimizer`` (a class name, ``AdamW``): a
    sentence."""
    return (
        "Fix: a fused step has no large temporaries "
        f"(torch.optim.{optimizer}(..., fused=True)); foreach=False keeps them to one tensor at a "
        "time (slower); or shard the optimizer state (ZeRO, FSDP)."
    )
