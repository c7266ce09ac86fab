"""``PlannedStep``: the training step ``memfit.apply`` returns, doing what the plan says.

One call is one optimizer step on a batch of the plan's global batch: the batch is split into
the plan's micro-batches, each micro-batch's loss runs under ``torch.autocast`` for mixed
precision (with a ``GradScaler`` for fp16), its backward is scaled by its share of the samples,
then the optimizer steps and the gradients are set to ``None``. The loop is
:class:`~memfit.runtime.AutoMicrobatch`'s, started at the planned micro-batch size: a batch
larger than planned runs as more micro-batches of that size, and an out-of-memory error halves
them (the smaller size is kept from then on: the guard does not grow past what worked). A plan
that steps the optimizer in backward runs the batch in one pass instead: it cannot be split.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from memfit._errors import InvalidInputError
from memfit.planner import unwrapped_model
from memfit.runtime._changes import Applied, applied_record
from memfit.runtime._microbatch import AutoMicrobatch
from memfit.runtime._split import batch_size
from memfit.technique import optimizer_variant_of
from memfit.workload import default_loss

if TYPE_CHECKING:
    from memfit.planner import Candidate, Plan

__all__ = ["AUTOCAST", "PlannedStep"]

LossFn = Callable[[nn.Module, Any], torch.Tensor]
# the dtype autocast runs in, by mixed precision; pure precisions cast the model instead
AUTOCAST = {"bf16-mixed": torch.bfloat16, "fp16-mixed": torch.float16}
PURE = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _prepare(batch: Any, device: torch.device, dtype: torch.dtype | None) -> Any:
    """A micro-batch on the model's device; floating inputs in the parameters' dtype for pure
    low precision (integer ids unchanged). A mapping becomes a ``dict`` (``model(**batch)``)."""
    if isinstance(batch, torch.Tensor):
        if dtype is not None and batch.is_floating_point():
            return batch.to(device=device, dtype=dtype, non_blocking=True)
        return batch.to(device, non_blocking=True)
    if isinstance(batch, Mapping):
        return {k: _prepare(v, device, dtype) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(_prepare(v, device, dtype) for v in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(_prepare(v, device, dtype) for v in batch)
    return batch


def _device_of(model: nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


class PlannedStep:
    """A training step that does what a plan chose; ``step(batch) -> loss`` (also
    ``step.step(batch)``).

    ``batch`` holds the plan's ``global_batch`` samples (a tensor, or a dict, tuple or list of
    them, split along dim 0); it may be on the CPU: each micro-batch is moved to the model's
    device as it runs. The loss is the batch's, detached (a tensor: reading it waits for the
    GPU). ``loss_fn(model, batch)`` computes a micro-batch's loss; without it, the model's own
    (``model(**batch).loss`` for a dict). ``changes`` lists what ``memfit.apply`` changed;
    :attr:`guard` is the :class:`AutoMicrobatch` that runs the micro-batches (its
    ``incidents`` are the out-of-memory errors it recovered from).
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        plan: Plan,
        candidate: Candidate,
        loss_fn: LossFn | None,
        before_step: Callable[[], object] | None,
    ) -> None:
        self.model = model
        self._inner = unwrapped_model(model)
        self.optimizer = optimizer
        self.plan = plan
        self.candidate = candidate
        self.changes: tuple[str, ...] = ()
        self._applied: Applied | None = None
        self._user_loss: LossFn = loss_fn or _model_loss
        self._autocast = AUTOCAST.get(candidate.precision)
        self._cast = PURE.get(candidate.precision)
        self._device = _device_of(model)
        self.scaler: torch.amp.GradScaler | None = None
        if candidate.precision == "fp16-mixed":
            self.scaler = torch.amp.GradScaler(self._device.type)
        self.guard = AutoMicrobatch(
            model,
            optimizer,
            _held_weakly(self._loss),
            scaler=self.scaler,
            before_step=before_step,
            grow_after=None,
            microbatch_size=candidate.micro_batch,
        )

    @property
    def micro_batch(self) -> int:
        """The micro-batch size now (the planned one, or smaller after an out-of-memory error)."""
        return self.guard.microbatch_size or self.candidate.micro_batch

    @property
    def accumulation(self) -> int:
        return self.candidate.accumulation

    @property
    def global_batch(self) -> int:
        return self.plan.global_batch

    def _loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        batch = _prepare(batch, self._device, self._cast)
        if self._autocast is None:
            return self._user_loss(model, batch)
        with torch.autocast(self._device.type, dtype=self._autocast):
            return self._user_loss(model, batch)

    def step(self, batch: Any) -> torch.Tensor:
        """One optimizer step on ``batch``; returns its loss (detached)."""
        if self._applied is None or applied_record(self._inner) is not self._applied:
            raise InvalidInputError(
                "This PlannedStep's plan is no longer applied to the model (memfit.unapply "
                "took it off, or another plan was applied since): call memfit.apply(model, "
                "optimizer, plan) again and use the step it returns."
            )
        self._device = _device_of(self._inner)  # where the model is now
        try:
            variant = optimizer_variant_of(self.candidate.optimizer)
            if variant is not None and variant.steps_in_backward:
                return self._step_in_backward(batch)
            return self.guard.step(batch)
        finally:
            self.optimizer.zero_grad(set_to_none=True)

    def _step_in_backward(self, batch: Any) -> torch.Tensor:
        """The batch in one pass, each parameter stepped by backward: it cannot be split
        (each part would step the optimizer), so a larger batch is refused and an
        out-of-memory error is not retried."""
        n = batch_size(batch)
        if n > self.candidate.micro_batch:
            raise InvalidInputError(
                f"The batch holds {n} samples; the plan steps the optimizer in backward at "
                f"{self.candidate.micro_batch}, which cannot be split into micro-batches "
                "(each would step the optimizer). Give batches of at most "
                f"{self.candidate.micro_batch} samples, or plan for this global batch."
            )
        try:
            loss = self._loss(self.model, batch)
            loss.backward()
        except torch.OutOfMemoryError as exc:
            note = getattr(exc, "add_note", None)  # Python 3.11+
            if note is not None:
                note(
                    f"memfit: the plan steps the optimizer in backward "
                    f"({self.candidate.optimizer}): the parameters backward had reached were "
                    "already updated, so this step "
                    "cannot be split and retried. Plan for a smaller budget or global batch."
                )
            raise
        self.optimizer.step()  # every gradient is None: nothing moves; a scheduler sees a step
        return loss.detach()

    __call__ = step

    def __repr__(self) -> str:
        c = self.candidate
        return (
            f"<PlannedStep {c.describe()}; global batch {self.plan.global_batch}; "
            f"{len(self.changes)} changes>"
        )


def _held_weakly(method: Callable[[nn.Module, Any], torch.Tensor]) -> LossFn:
    """``method`` for the guard, holding its step weakly: the step holds the guard, and a cycle
    would keep a dropped step's model and optimizer (their GPU memory) until the garbage
    collector ran."""
    ref = weakref.WeakMethod(method)

    def loss(model: nn.Module, batch: Any) -> torch.Tensor:
        bound = ref()
        if bound is None:
            raise InvalidInputError("This PlannedStep was dropped; use the step apply returned.")
        return bound(model, batch)

    return loss


def _model_loss(model: nn.Module, batch: Any) -> torch.Tensor:
    """The model's own loss, as the planner's trace computes it (``memfit.workload``)."""
    return default_loss(model, batch)
