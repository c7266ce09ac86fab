"""``memfit.apply`` and ``memfit.unapply``: make a model, its optimizer and the allocator do
what a plan chose, and take it back.

``apply`` checks everything first and changes nothing when it refuses: the model must be the one
the plan was made for (:func:`memfit.planner.model_key`), the plan must have found something
that fits, the optimizer must hold the model's parameters, and each change must be possible
(blocks to checkpoint, an allocator text torch takes). Then it makes the changes (activation
checkpointing, pure low precision, the optimizer's implementation, the allocator settings),
records them on the model and returns a :class:`PlannedStep`. ``unapply`` takes back each
change in reverse order, from that record.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable

import torch
from torch import nn

from memfit._errors import InvalidInputError
from memfit._units import format_bytes
from memfit.planner import Candidate, Plan, model_key, unwrapped_model
from memfit.runtime._allocator_change import AllocatorChange
from memfit.runtime._changes import (
    RECORD,
    Applied,
    Cast,
    Change,
    OptimizerFlags,
    TechniqueChange,
    applied_record,
)
from memfit.runtime._guard_checks import check_callables, check_parts, refuse_sharded
from memfit.runtime._microbatch import LossFn
from memfit.runtime._planned_step import AUTOCAST, PURE, PlannedStep
from memfit.technique import check_fusable, optimizer_variant_of, techniques_in
from memfit.technique.compilation import check_memory_budget
from memfit.workload import valid_checkpointing

__all__ = ["apply", "unapply"]

_PRECISIONS = ("fp32", *AUTOCAST, *PURE)
# the kinds of optimizer whose implementation apply sets, and the plan's names for them
_KINDS: tuple[tuple[str, type[torch.optim.Optimizer]], ...] = (
    ("sgd", torch.optim.SGD),
    ("adam", torch.optim.Adam),  # AdamW too (a subclass in torch 2.x); isinstance below
    ("adam", torch.optim.AdamW),
)
_FAMILIES = {"sgd": "sgd", "adam": "adam", "adamw": "adam"}
# the implementation a name's suffix picks, as (fused, foreach); no suffix: left as it is
_IMPLS = {"fused": (True, False), "foreach": (False, True), "forloop": (False, False)}


def apply(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    plan: Plan,
    *,
    loss_fn: LossFn | None = None,
    before_step: Callable[[], object] | None = None,
) -> PlannedStep:
    """Make ``model`` and ``optimizer`` train as ``plan`` chose; returns the step to call.

    Refuses (:class:`memfit.InvalidInputError`, nothing changed) a model other than the plan's,
    a plan that found nothing that fits, and an optimizer that holds other parameters than the
    model's. ``loss_fn(model, batch) -> loss`` computes a micro-batch's loss (default: the
    model's own); ``before_step()`` runs when the gradients are complete, before the optimizer
    steps (gradient clipping). :func:`unapply` takes every change back. The CUDA cache is
    emptied (what building the model left cached would change where the step's blocks go).
    """
    check_parts(model, optimizer, loss_fn, None)
    refuse_sharded(model, "memfit.apply")
    check_callables(before_step=before_step)
    if not isinstance(plan, Plan):
        raise InvalidInputError(
            f"plan={type(plan).__name__} is not a memfit Plan: pass what memfit.plan(...) "
            "returned, e.g. memfit.apply(model, optimizer, memfit.plan(model, batch, "
            'budget="24GiB")).'
        )
    inner = unwrapped_model(model)
    if applied_record(inner) is not None:
        raise InvalidInputError(
            f"A plan is already applied to this {type(inner).__name__}: applying another on "
            "top would mix the two. Call memfit.unapply(model, optimizer) first."
        )
    candidate = _chosen(plan, inner)
    _check_optimizer(inner, optimizer)
    variant = optimizer_variant_of(candidate.optimizer)
    if before_step is not None and variant is not None and variant.steps_in_backward:
        raise InvalidInputError(
            f"The plan steps the optimizer in backward ({candidate.optimizer}): each parameter "
            "is updated as soon as its gradient is complete, so there is no moment when the "
            "gradients are complete together for before_step (gradient clipping by the global "
            "norm cannot run). Plan without it (memfit.plan(..., optimizers=[...]) naming "
            "variants that step after backward) or drop before_step; nothing was changed."
        )
    changes = _changes(model, inner, optimizer, candidate)
    step = PlannedStep(model, optimizer, plan, candidate, loss_fn, before_step)
    done: list[Change] = []
    try:
        for change in changes:
            change.do()
            done.append(change)
    except BaseException:
        for change in reversed(done):
            change.undo()
        raise
    if torch.cuda.is_initialized():
        # the plan's memory is the step's in a pool without what building the model left
        # cached: GPT-2 built on an H200 reserved 1.55 GB more at its planned step's peak
        # (8.67 GB against 7.12 estimated, and measured after this)
        torch.cuda.empty_cache()
        _warn_pinned_cache(plan.budget)
    record = Applied(changes, weakref.ref(optimizer), plan.model_key)
    inner.__dict__[RECORD] = record
    step._applied = record
    step.changes = tuple(c.text for c in changes)
    return step


PINNED_SHARE = 0.10  # of the budget: cached memory empty_cache left, worth a warning


def _warn_pinned_cache(budget: int) -> None:
    """Say so when the process keeps cached memory the plan does not count: segments that
    ``empty_cache`` cannot release because live tensors sit in them (optimizer state made
    during a step the script ran before the plan lands amid the freed activations: a small
    GPT-2's 185 MiB of state kept 3.25 GiB reserved on an H100)."""
    cached = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
    if cached > PINNED_SHARE * budget:
        warnings.warn(
            f"This process keeps {format_bytes(cached)} of cached CUDA memory that "
            "empty_cache cannot release (segments that tensors made during an earlier step, "
            "such as optimizer state, keep); the plan counts from an empty cache, so its "
            f"steps may need more than the {format_bytes(budget)} budget. Plan and apply "
            "before the first step (or in a fresh process) to keep to it.",
            stacklevel=3,
        )


def unapply(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Take back everything :func:`apply` changed on ``model`` and ``optimizer``:
    checkpointing off, parameters and buffers back in their dtypes (with the low precision's
    rounding), the optimizer's ``fused``/``foreach`` flags and the allocator settings as they
    were (where torch can set them back at run time; a warning names the rest)."""
    if not isinstance(model, nn.Module):
        raise InvalidInputError(
            f"memfit.unapply needs the torch.nn.Module a plan was applied to, not "
            f"{type(model).__name__}: call memfit.unapply(model, optimizer)."
        )
    inner = unwrapped_model(model)
    record = applied_record(inner)
    if record is None:
        raise InvalidInputError(
            f"No plan is applied to this {type(inner).__name__}, so there is nothing to take "
            "back: memfit.unapply(model, optimizer) undoes memfit.apply (or memfit.fit) on the "
            "same model; call it once, after applying."
        )
    if record.optimizer() is not optimizer:
        raise InvalidInputError(
            f"optimizer={type(optimizer).__name__} is not the optimizer the plan was applied "
            "with: pass the same optimizer to memfit.unapply as to memfit.apply, so that its "
            "flags are restored on the right one."
        )
    for change in reversed(record.changes):
        change.undo()
    del inner.__dict__[RECORD]


def _chosen(plan: Plan, model: nn.Module) -> Candidate:
    """The plan's chosen candidate, once the model is the plan's and the plan fits."""
    key = model_key(model)
    if key != plan.model_key:
        raise InvalidInputError(
            f"This plan was made for {plan.model_key} ({plan.model}), but the model given is "
            f"{key} (class/parameter elements/parameter tensors): its micro-batch and settings "
            "would not hold for this model, so nothing was changed. Plan for this model: "
            "memfit.plan(model, batch, budget=...), then apply that plan."
        )
    if plan.chosen is None:
        smallest = plan.smallest.candidate.describe() if plan.smallest else "none"
        raise InvalidInputError(
            f"The plan found nothing that fits {format_bytes(plan.budget)} for {plan.model}: "
            f"the smallest configuration ({smallest}) is {format_bytes(plan.shortfall)} over "
            "(plan.smallest, plan.shortfall), so there is nothing to apply. Plan again with "
            + ("; ".join(plan.would_fit) if plan.would_fit else "a larger budget")
            + ", or a smaller global batch."
        )
    _refuse_added(plan, plan.chosen.candidate)
    return _checked(plan.chosen.candidate)


def _refuse_added(plan: Plan, c: Candidate) -> None:
    """A plan that adds a technique which changes what is trained (LoRA, 4-bit weights, as
    the user allowed it) is refused: apply changes how a model trains, never what."""
    mine = dict(plan.baseline.candidate.techniques) if plan.baseline is not None else {}
    for technique, value in techniques_in(c.techniques):
        if technique.kept_in_plans and mine.get(technique.option.keyword) != value:
            raise InvalidInputError(
                f"The plan's choice adds {technique.words(value)}, which you allowed it to: "
                "that changes what the model trains, and memfit.apply changes only how it "
                "trains, so nothing was changed. Make the model so yourself (PEFT's "
                "get_peft_model for LoRA, bitsandbytes' 4-bit loading for quantized weights), "
                "plan that model, and apply that plan."
            )


def _checked(c: Candidate) -> Candidate:
    for name in ("micro_batch", "accumulation"):
        value = getattr(c, name)
        if type(value) is not int or value < 1:
            raise InvalidInputError(
                f"The plan's {name}={value!r} is not a whole number >= 1; the plan is damaged: "
                "make it again with memfit.plan."
            )
    if c.precision not in _PRECISIONS:
        raise InvalidInputError(
            f"The plan's precision {c.precision!r} is not one of {', '.join(_PRECISIONS)}; "
            "make the plan again with memfit.plan."
        )
    if not valid_checkpointing(c.checkpointing):
        raise InvalidInputError(
            f"The plan's checkpointing {c.checkpointing!r} is not False, True, 'selective' or "
            "a fraction between 0 and 1; make the plan again with memfit.plan."
        )
    check_memory_budget(c.memory_budget)
    return c


def _check_optimizer(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    owned = {id(p) for p in model.parameters()}
    held = [p for g in optimizer.param_groups for p in g["params"]]
    foreign = [p for p in held if id(p) not in owned]
    if foreign:
        shapes = ", ".join(str(tuple(p.shape)) for p in foreign[:3])
        raise InvalidInputError(
            f"The optimizer holds {len(foreign)} of {len(held)} parameters that are not "
            f"{type(model).__name__}'s (shapes {shapes}): it was built for another model or "
            "a copy. Build it from this model (torch.optim.AdamW(model.parameters(), ...)) and "
            "apply the plan again; nothing was changed."
        )


def _changes(
    held: nn.Module, model: nn.Module, optimizer: torch.optim.Optimizer, c: Candidate
) -> list[Change]:
    """The changes the candidate asks of this model (``held``: as the user holds it, a
    compiled wrapper around ``model``), each checked, none made yet."""
    # the techniques the step's own settings ask for first (a compiled model's budget,
    # checkpointing, then activation offload around the blocks it leaves)
    changes: list[Change] = [
        TechniqueChange(technique, value, held if technique.live_on_wrapper else model, optimizer)
        for technique, value in c.given_techniques()
    ]
    flags = _optimizer_flags(optimizer, c.optimizer)
    if flags is not None:
        changes.append(flags)
    if c.precision in PURE:  # last: taking a cast back keeps its rounding
        changes.append(Cast(model, optimizer, PURE[c.precision]))
    variant = optimizer_variant_of(c.optimizer)
    if variant is not None and variant.changes_live:  # after the cast: its reload replaces state
        changes.append(TechniqueChange(variant, c.optimizer, model, optimizer))
    for technique, value in techniques_in(c.techniques):  # last: on the optimizer as cast
        if not technique.kept_in_plans:  # those kept are the user's model's own already
            changes.append(TechniqueChange(technique, value, model, optimizer))
    if c.allocator_config:  # first to be made: the one torch may still refuse
        allocator = AllocatorChange(c.allocator_config)
        reason = _allocator_blocked(model)
        if reason is None:
            changes.insert(0, allocator)
        else:
            warnings.warn(
                f"The plan's allocator setting {c.allocator_config} cannot take effect: "
                f"{reason}. Start the process with PYTORCH_CUDA_ALLOC_CONF="
                f"{c.allocator_config} to use it; the plan's memory counts on it.",
                RuntimeWarning,
                stacklevel=4,
            )
    return changes


def _allocator_blocked(model: nn.Module) -> str | None:
    """Why allocator settings cannot act for this model; ``None`` when they can."""
    if not torch.cuda.is_available():
        return "this process has no CUDA device"
    if not any(p.device.type == "cuda" for p in model.parameters()):
        return "the model is not on a CUDA device (move it with model.cuda() before applying)"
    return None


def _optimizer_flags(optimizer: torch.optim.Optimizer, name: str) -> Change | None:
    family, _, impl = name.partition("-")
    variant = optimizer_variant_of(name)
    if variant is not None:
        variant.check_live(name, optimizer)  # refuses an optimizer it cannot run on
        if not variant.changes_live:
            return None  # the user's own optimizer of the variant, as built
    kind = next((k for k, cls in _KINDS if isinstance(optimizer, cls)), None)
    if kind is None:
        warnings.warn(
            f"The plan was made for the optimizer {name}; {type(optimizer).__name__} is not "
            "one memfit knows (SGD, Adam, AdamW), so its implementation is left as it is and "
            "its state may take other memory than the plan counted.",
            RuntimeWarning,
            stacklevel=4,
        )
        return None
    if _FAMILIES.get(family, kind) != kind:
        raise InvalidInputError(
            f"The plan was made for the optimizer {name!r}, but the optimizer given is "
            f"{type(optimizer).__name__}, whose state takes other memory. Plan with your "
            f"optimizer (memfit.plan(..., optimizer='{kind}')) or build the plan's; nothing "
            "was changed."
        )
    if variant is not None:
        return None  # the variant's own change sets the optimizer up (its apply)
    if impl not in _IMPLS:
        return None  # the default implementation: the optimizer's flags are left as they are
    fused, foreach = _IMPLS[impl]
    if fused:
        check_fusable(optimizer, name)
    return OptimizerFlags(optimizer, fused, foreach, name)
