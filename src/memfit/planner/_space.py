"""What a plan searches: the precisions, checkpointing, the optimizers (the family's plain
ones, bisected, and those its variants offer, searched after them) and, for a model compiled
as a whole, torch.compile's activation memory budgets, each checked against the workload before
any tracing."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from memfit._errors import InvalidInputError
from memfit._gpus import GPU
from memfit.planner._variant_search import accumulates
from memfit.technique import TECHNIQUES, OptimizerVariant, optimizer_variant_of
from memfit.technique.compilation import check_memory_budget
from memfit.workload import Workload

__all__ = ["CHECKPOINTING", "COMPILED_BUDGETS", "compiled_plan_note", "search_space"]

# torch.compile's activation memory budgets a compiled model's plan tries by default: what the
# forward saves is not monotonic in it (GPT-2, H200: 0.5 took less than 0.2 and than 0.0)
COMPILED_BUDGETS = (1.0, 0.5, 0.25)
CHECKPOINTING: tuple[bool | str, ...] = (False, "selective", True)


def search_space(
    base: Workload,
    gpu: GPU,
    precisions: Any,
    checkpointing: Any,
    optimizers: Any,
    memory_budgets: Any = None,
) -> dict[str, tuple[Any, ...]]:
    family = str(base.optimizer).partition("-")[0]
    half = "bf16-mixed" if gpu.sm >= 80 else "fp16-mixed"
    variants = [t for t in TECHNIQUES if isinstance(t, OptimizerVariant)]
    names = (
        tuple(optimizers)
        if optimizers
        else (
            f"{family}-fused",
            f"{family}-foreach",
            f"{family}-forloop",
            *(o for v in variants for o in v.offered(family, base)),
        )
    )
    for o in names:
        dataclasses.replace(base, optimizer=o, accumulation=1, precision="fp32")  # checked
    plain = tuple(o for o in names if optimizer_variant_of(o) is None)
    after = plain or tuple(o for o in names if accumulates(o))
    if not after:
        given = {optimizer_variant_of(o) for o in names}
        alone = [v for v in variants if v in given]  # none of them accumulates
        raise InvalidInputError(
            f"optimizers={names!r} names only optimizers that cannot accumulate gradients over "
            f"micro-batches ({' and '.join(v.searched_words for v in alone)}): add one that "
            f"steps after backward, e.g. optimizers=('{family}-fused', "
            f"'{family}{alone[0].suffix}')."
        )
    space: dict[str, tuple[Any, ...]] = {
        "precisions": tuple(precisions) if precisions else _default_precisions(base, half),
        "checkpointing": tuple(checkpointing) if checkpointing is not None else CHECKPOINTING,
        "optimizers": after,  # bisected and refined: they accumulate
        # the optimizer's variants searched after the bisections (search_variants)
        "variants": tuple(o for o in names if o not in after),
    }
    for p in space["precisions"]:
        dataclasses.replace(base, precision=p)  # checked by Workload: a clear error
    for c in space["checkpointing"]:
        dataclasses.replace(base, activation_checkpointing=c)
    if memory_budgets is not None and not isinstance(memory_budgets, (tuple, list)):
        raise InvalidInputError(
            f"memory_budgets={memory_budgets!r} is not a list: give the activation memory "
            "budgets to try as a tuple of shares between 0 and 1, e.g. memory_budgets=(1.0, 0.5)."
        )
    blocks, (trained, trainable), compiled = _model_facts(base)
    space["blocks"], space["trained"] = (blocks,), (trained,)
    space["trainable"] = (trainable,)
    space["budgets"] = (base.activation_memory_budget,)
    space["compiled"] = (compiled,)
    if checkpointing is None and not blocks:  # nothing to checkpoint: not searched
        space["checkpointing"] = (False,)
    if compiled:
        _compiled_space(space, base, precisions, checkpointing, memory_budgets)
    elif memory_budgets:
        raise InvalidInputError(
            f"memory_budgets={tuple(memory_budgets)!r} would be ignored: they are "
            "torch.compile's activation memory budgets, and this model is not compiled as a "
            "whole. Drop them (checkpointing= chooses what an eager model recomputes), or plan "
            "torch.compile(model)."
        )
    return space


def _default_precisions(base: Workload, half: str) -> tuple[str, ...]:
    """The GPU's mixed precision and fp32, and the user's own precision beside them (pure
    bf16 or fp16 halves the weights, gradients and optimizer states that mixed precision
    keeps in fp32: a plan must never miss what the user already runs)."""
    defaults = (half, "fp32")
    return defaults if base.precision in defaults else (base.precision, *defaults)


def _compiled_space(
    space: dict[str, tuple[Any, ...]],
    base: Workload,
    precisions: Any,
    checkpointing: Any,
    memory_budgets: Any,
) -> None:
    """A model compiled as a whole is planned over torch.compile's activation memory budget
    in place of memfit's checkpointing (inductor's partitioner decides what to recompute), at
    the user's precision unless others are asked for: each candidate is a capture of the
    compiled step, about a minute of CPU for a GPT-2. The optimizer's variants are not
    searched for it."""
    if checkpointing and tuple(checkpointing) != (False,):
        raise InvalidInputError(
            f"checkpointing={tuple(checkpointing)!r} for a model compiled with torch.compile: "
            "memfit plans a compiled model's recomputation by torch.compile's activation "
            "memory budget; give memory_budgets=(1.0, 0.5, ...) instead, or plan the "
            "uncompiled model."
        )
    space["checkpointing"] = (False,)
    space["budgets"] = tuple(memory_budgets) if memory_budgets else COMPILED_BUDGETS
    for b in space["budgets"]:
        check_memory_budget(b)
    if not precisions:
        space["precisions"] = (base.precision,)
    space["variants"] = ()


def compiled_plan_note(space: dict[str, tuple[Any, ...]]) -> str:
    """What a compiled model's plan searched, in words."""
    budgets = ", ".join(f"{b:g}" for b in space["budgets"])
    variants = ", ".join(t.searched_words for t in TECHNIQUES if isinstance(t, OptimizerVariant))
    return (
        "the model is compiled with torch.compile: the plan searched torch.compile's "
        f"activation memory budget ({budgets}) in place of checkpointing, at "
        f"{' and '.join(space['precisions'])}, each candidate captured as inductor compiles "
        f"it; the optimizer's variants ({variants}) were not tried. "
        "Below a budget of 1 a first run's reserved memory varied by 4% between fresh runs "
        "(H200, torch 2.11): keep a margin"
    )


def _model_facts(base: Workload) -> tuple[int, tuple[int, int], bool]:
    """How many repeated blocks memfit's checkpointing finds in the model (the models' own
    switches checkpoint the same blocks; 0 where it finds none), its parameter elements (all,
    as the searches size gradients by; and those that require a gradient), and whether it is
    compiled as a whole."""
    from memfit.technique.checkpointing import find_blocks
    from memfit.technique.compilation import compiled_parts, whole_model_compiled

    with torch.device("meta"):
        model = base.build_model()
    unique = {id(p): p for p in model.parameters()}.values()
    counts = (sum(p.numel() for p in unique), sum(p.numel() for p in unique if p.requires_grad))
    compiled = base.compiled is None and whole_model_compiled(model, compiled_parts(model))
    try:
        return len(find_blocks(model)), counts, compiled
    except InvalidInputError:
        return 0, counts, compiled
