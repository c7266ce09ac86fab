"""memfit in the Hugging Face ``Trainer``: a callback, and a Trainer whose steps survive OOM.

``AutoMicrobatchTrainer`` (or ``AutoMicrobatchMixin`` before your own ``Trainer`` subclass, e.g.
``class MyTrainer(AutoMicrobatchMixin, SFTTrainer)``) runs each ``training_step`` through
:class:`memfit.AutoMicrobatch`: on a CUDA out-of-memory error the batch is re-run as
micro-batches and the gradients accumulated, so the update is the one the batch would have
given. Each micro-batch's loss is weighted by its share of the samples, and the
``num_items_in_batch`` the Trainer passes (token counts, for models that accept loss kwargs) is
given to it scaled by the same share: a loss normalised by it and a loss that ignores it both
add up to the whole batch's. The division by the accumulation steps follows the Trainer. The
backward pass goes through ``accelerator.backward`` (fp16 scaling included). The optimizer
step stays the Trainer's. One process only (no DDP, FSDP or DeepSpeed)::

    trainer = AutoMicrobatchTrainer(model=model, args=args, train_dataset=ds,
                                    memfit_options={"grow_after": 200},
                                    callbacks=[MemfitTrainerCallback(oom_dir="oom")])
"""

from __future__ import annotations

import os
from typing import Any

import torch

from memfit._errors import InvalidInputError, MissingExtraError
from memfit.integrations._services import Services
from memfit.runtime import AutoMicrobatch, LeakDetector, LeakReport, batch_size

try:
    import transformers
except ImportError:  # pragma: no cover - exercised where transformers is missing
    raise MissingExtraError("transformers", "memfit's Hugging Face integration", "hf") from None

__all__ = ["AutoMicrobatchMixin", "AutoMicrobatchTrainer", "MemfitTrainerCallback"]


class MemfitTrainerCallback(transformers.TrainerCallback):
    """OOM reports and a leak detector for a Hugging Face ``Trainer``.

    ``oom_dir``: directory for out-of-memory reports (``memfit.oom_report``; ``None``: off).
    ``leak_detector``: ``True`` (default settings), a configured
    :class:`memfit.runtime.LeakDetector`, or ``False``; it is stepped after each optimizer step
    and its reports are in :attr:`leak_reports`. With :class:`AutoMicrobatchTrainer` the logs
    also get ``memfit/microbatch_size`` (0 for whole batches) and ``memfit/oom_incidents``.
    """

    def __init__(
        self,
        *,
        oom_dir: str | os.PathLike[str] | None = "memfit-oom",
        leak_detector: bool | LeakDetector = True,
    ) -> None:
        self.services = Services(oom_dir, leak_detector)
        self.leak_reports: list[LeakReport] = []
        self.guard: AutoMicrobatch | None = None  # set by AutoMicrobatchTrainer

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.services.start()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        report = self.services.step()
        if report is not None:
            self.leak_reports.append(report)

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
    ) -> None:
        if logs is not None and self.guard is not None:
            logs["memfit/microbatch_size"] = self.guard.microbatch_size or 0
            logs["memfit/oom_incidents"] = len(self.guard.incidents)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.services.stop()


class _TrainerGuard(AutoMicrobatch):
    """``AutoMicrobatch`` whose backward passes go through ``accelerator.backward``."""

    def __init__(self, trainer: Any, model: torch.nn.Module, **options: Any) -> None:
        super().__init__(model, None, trainer._memfit_loss, **options)
        self._accelerator = trainer.accelerator

    def _backward(self, loss: torch.Tensor) -> None:
        self._accelerator.backward(loss)


class AutoMicrobatchMixin:
    """Put before a ``transformers.Trainer`` subclass to guard its ``training_step``.

    ``memfit_options``: :class:`memfit.AutoMicrobatch` keyword arguments (``grow_after``,
    ``min_microbatch``, ``on_incident``, ``split_fn``...). The guard is :attr:`memfit_guard`.
    """

    def __init__(self, *args: Any, memfit_options: dict[str, Any] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.memfit_options = dict(memfit_options or {})
        self.memfit_guard: AutoMicrobatch | None = None
        self._memfit_items: Any = None
        self._memfit_total = 0
        self._memfit_divide = 1

    def _memfit_check(self) -> None:
        trainer: Any = self
        processes = trainer.accelerator.num_processes
        kind = str(trainer.accelerator.distributed_type)
        if processes > 1 or "DEEPSPEED" in kind or "FSDP" in kind:
            raise InvalidInputError(
                f"AutoMicrobatchTrainer runs in one process; this run has {processes} "
                f"({kind}), whose backward passes synchronise inside each micro-batch. Use "
                "memfit.AutoMicrobatch with a DistributedDataParallel model in a plain loop, or "
                "the plain Trainer with MemfitTrainerCallback for the OOM reports."
            )

    def _memfit_loss(self, model: torch.nn.Module, inputs: Any) -> torch.Tensor:
        trainer: Any = self
        items = self._memfit_items
        size = self.memfit_options.get("size_fn") or batch_size
        n = size(inputs)
        if items is not None and n != self._memfit_total:
            items = items * (n / self._memfit_total)  # the guard weights the loss by n / total
        with trainer.compute_loss_context_manager():
            loss: torch.Tensor = trainer.compute_loss(model, inputs, num_items_in_batch=items)
        if trainer.args.n_gpu > 1:
            loss = loss.mean()  # DataParallel returns one loss per GPU
        return loss / self._memfit_divide if self._memfit_divide != 1 else loss

    def training_step(
        self, model: torch.nn.Module, inputs: dict[str, Any], num_items_in_batch: Any = None
    ) -> torch.Tensor:
        trainer: Any = self
        self._memfit_check()
        model.train()
        if callable(getattr(trainer.optimizer, "train", None)):
            trainer.optimizer.train()
        inputs = trainer._prepare_inputs(inputs)
        scaled = getattr(trainer, "loss_is_scaled_for_ga", None)
        if scaled is None:  # the Trainer's own rule (transformers 4.46 and later)
            scaled = (
                trainer.model_accepts_loss_kwargs and num_items_in_batch is not None
            ) or trainer.compute_loss_func is not None
        steps = getattr(trainer, "current_gradient_accumulation_steps", None)
        self._memfit_divide = 1 if scaled else steps or trainer.args.gradient_accumulation_steps
        self._memfit_items = num_items_in_batch
        self._memfit_total = (self.memfit_options.get("size_fn") or batch_size)(inputs)
        guard = self.memfit_guard
        if guard is None or guard.model is not model:
            guard = _TrainerGuard(trainer, model, **self.memfit_options)
            if self.memfit_guard is not None:  # keep what the guard learnt
                guard.incidents = self.memfit_guard.incidents
            self.memfit_guard = guard
            for callback in trainer.callback_handler.callbacks:
                if isinstance(callback, MemfitTrainerCallback):
                    callback.guard = guard
        return guard.backward_only(inputs)


class AutoMicrobatchTrainer(AutoMicrobatchMixin, transformers.Trainer):
    """``transformers.Trainer`` whose training steps split the batch on CUDA out-of-memory."""
