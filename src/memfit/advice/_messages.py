"""The advice inside the errors other layers raise: what to change when an estimated step does
not fit (``find_batch_size``'s ``DoesNotFitError``) and when the micro-batch guard can split no
further or runs out in the optimizer step (its ``UnrecoverableOOMError``).

They name the changes ``memfit estimate`` can predict, with the measured shares of
:mod:`memfit.advice._factors` where the working set is known.
"""

from __future__ import annotations

from dataclasses import dataclass

from memfit._units import format_bytes
from memfit.advice._factors import CHECKPOINTING, MIXED_PRECISION, Factor

__all__ = [
    "StepSettings",
    "does_not_fit_message",
    "optimizer_step_advice",
    "smaller_step_advice",
]


@dataclass(frozen=True)
class StepSettings:
    """The settings of the step that did not fit, which decide the changes to suggest."""

    precision: str = "fp32"
    mode: str = "train"
    activation_checkpointing: bool | str | float = False
    optimizer: str = "adamw"


def does_not_fit_message(
    gpu_name: str,
    batch_size: int,
    need: int,
    context: int,
    peak_reserved: int,
    budget: int,
    settings: StepSettings = StepSettings(),
) -> str:
    """The error for a step whose estimate at the smallest batch size is over ``budget``: the
    numbers, whose parts add up to the total (``need``, the least reserved memory the step
    runs in, plus the CUDA ``context``), then only the changes not already in effect, each as
    the Python setting and the command-line flag."""
    precision, mode = settings.precision, settings.mode
    checkpointing, optimizer = settings.activation_checkpointing, settings.optimizer
    spare = f", {format_bytes(peak_reserved)} with memory to spare" if peak_reserved > need else ""
    changes = [
        f"{what} ({python}, {flag})"
        for what, python, flag, applies in (
            (
                "bf16 mixed precision",
                "precision='bf16-mixed'",
                "--precision bf16-mixed",
                precision == "fp32",
            ),
            (
                "bf16 weights and optimizer state",
                "precision='bf16'",
                "--precision bf16",
                precision not in ("bf16", "fp16"),
            ),
            (
                "activation checkpointing",
                "activation_checkpointing=True",
                "--checkpointing",
                mode == "train" and checkpointing is not True,  # selective: more
            ),
            (
                "an optimizer with less state",
                "optimizer='sgd'",
                "--optimizer sgd",
                mode == "train" and not optimizer.startswith("sgd"),
            ),
        )
        if applies
    ]
    changes += ["a shorter sequence or smaller inputs", "or a larger GPU"]
    return (
        f"The step does not fit {gpu_name} even at batch size {batch_size}: the estimate is "
        f"{format_bytes(need + context)} ({format_bytes(need)} reserved by the caching "
        f"allocator at the least{spare}, plus {format_bytes(context)} of CUDA context) against "
        f"a budget of {format_bytes(budget)}. Make it smaller: {', '.join(changes)}."
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
