"""memfit in Lightning 2.x: a callback, and the OOM guard for manual optimization.

Lightning's automatic optimization runs ``training_step``, the backward pass and the optimizer
step itself, so nothing outside can re-run a batch as micro-batches. The guard therefore runs
in a manual-optimization ``training_step`` (``self.automatic_optimization = False``), where it
owns forward, backward (through ``manual_backward``, so the precision plugin scales the loss)
and the step (through Lightning's optimizer, so ``global_step`` counts and the plugin unscales)::

    class Model(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False
            self.net = ...
            self.guard = None

        def loss(self, module, batch):
            x, y = batch
            return F.cross_entropy(module.net(x), y)

        def training_step(self, batch, batch_idx):
            if self.guard is None:
                self.guard = lightning_guard(self, self.loss)
            self.log("loss", self.guard.step(batch))

    trainer = L.Trainer(callbacks=[MemfitCallback(oom_dir="oom")])

One device only: under DDP Lightning's backward synchronises gradients inside each micro-batch.
``MemfitCallback`` works with automatic optimization too (reports and leak checks).
"""

from __future__ import annotations

import os
from typing import Any, cast

import torch

from memfit._errors import InvalidInputError, MissingExtraError
from memfit.integrations._services import Services
from memfit.runtime import AutoMicrobatch, LeakDetector, LossFn

try:
    import lightning.pytorch as pl
except ImportError:  # pragma: no cover - exercised where lightning is missing
    raise MissingExtraError("lightning", "The Lightning integration", "lightning") from None

__all__ = ["LightningAutoMicrobatch", "MemfitCallback", "lightning_guard"]


class LightningAutoMicrobatch(AutoMicrobatch):
    """``AutoMicrobatch`` whose backward passes go through ``LightningModule.manual_backward``."""

    def __init__(self, module: pl.LightningModule, loss_fn: LossFn | None, **options: Any) -> None:
        optimizer = module.optimizers()
        if isinstance(optimizer, list):
            raise InvalidInputError(
                f"lightning_guard steps one optimizer; {type(module).__name__}."
                f"configure_optimizers returns {len(optimizer)}. Call AutoMicrobatch.backward_only "
                "for each loss and step the optimizers yourself."
            )
        # a LightningOptimizer is made a subclass of the optimizer's class at run time
        super().__init__(module, cast(torch.optim.Optimizer, optimizer), loss_fn, **options)
        self._lightning = module

    def _backward(self, loss: torch.Tensor) -> None:
        self._lightning.manual_backward(loss)


def lightning_guard(
    module: pl.LightningModule, loss_fn: LossFn | None = None, **options: Any
) -> LightningAutoMicrobatch:
    """The OOM guard for ``module``'s manual-optimization ``training_step``.

    ``loss_fn(module, batch) -> loss`` (default ``module(batch)``); ``options`` are
    :class:`memfit.AutoMicrobatch`'s. Call it inside ``training_step`` (the trainer and its
    optimizer exist by then) and keep the guard: it remembers the micro-batch size. Then
    ``guard.step(batch)`` clears the gradients, runs the batch, steps the optimizer.
    """
    if module.automatic_optimization:
        raise InvalidInputError(
            f"lightning_guard needs manual optimization: set self.automatic_optimization = False "
            f"in {type(module).__name__}.__init__ (Lightning's automatic optimization runs the "
            "backward pass and the step itself, so the batch cannot be re-run in parts)."
        )
    world = module.trainer.world_size
    if world > 1:
        raise InvalidInputError(
            f"lightning_guard runs on one device; this Trainer has {world} "
            "processes, whose backward passes synchronise inside each micro-batch. Use "
            "memfit.AutoMicrobatch with a DistributedDataParallel model in a plain loop instead."
        )
    return LightningAutoMicrobatch(module, loss_fn, **options)


class MemfitCallback(pl.Callback):
    """OOM reports, a leak detector and the guard's state, for a Lightning ``Trainer``.

    ``oom_dir``: directory for out-of-memory reports (``memfit.oom_report``; ``None``: off).
    ``leak_detector``: ``True`` (default settings), a configured
    :class:`memfit.runtime.LeakDetector`, or ``False``; it is stepped after each training batch
    and its reports are in :attr:`leak_reports`. When the module has a guard (an
    ``AutoMicrobatch`` attribute), its micro-batch size and incident count are logged as
    ``memfit/microbatch_size`` (0 for whole batches) and ``memfit/oom_incidents``.
    """

    def __init__(
        self,
        *,
        oom_dir: str | os.PathLike[str] | None = "memfit-oom",
        leak_detector: bool | LeakDetector = True,
    ) -> None:
        super().__init__()
        self.services = Services(oom_dir, leak_detector)
        self.leak_reports: list[Any] = []

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.services.start()

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        report = self.services.step()
        if report is not None:
            self.leak_reports.append(report)
        guard = next((v for v in vars(pl_module).values() if isinstance(v, AutoMicrobatch)), None)
        if guard is not None:
            size = guard.microbatch_size or 0
            pl_module.log("memfit/microbatch_size", float(size), on_step=True)
            pl_module.log("memfit/oom_incidents", float(len(guard.incidents)), on_step=True)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.services.stop()

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self.services.stop()
