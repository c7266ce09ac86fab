"""``memfit.AutoMicrobatch``: a training step that survives the batch that does not fit.

On ``torch.OutOfMemoryError`` in the forward or backward pass the guard drops the failed
attempt (its gradients, its autograd graph, the exception's frames), frees the CUDA cache, splits
the batch into micro-batches half the size and runs them again, accumulating gradients so the
update equals the unsplit one. It remembers the micro-batch size that worked and, after
``grow_after`` clean steps, tries twice that size; if that fails it goes back and waits twice as
long. Every sample is used exactly once per step, whatever happens.

Why the update is the same: with a mean-reduced loss, micro-batch ``i`` of ``n_i`` of the batch's
``N`` samples contributes ``loss_i * n_i / N``, and the sum of those gradients is the gradient
of the whole batch's mean, for uneven splits too. It is equal up to floating-point rounding (the
summation order changes), not bit for bit. Not the same when a step depends on the batch as a
whole: batch-norm statistics in training mode, a loss averaged over tokens rather than samples
(use ``reduction="sum"`` and divide by the batch's token count, carried in the batch as a plain
number), and dropout (its random numbers are drawn in another order).
"""

from __future__ import annotations

import contextlib
import gc
import math
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypedDict

import torch

from memfit._errors import InvalidInputError, UnrecoverableOOMError
from memfit.runtime._distributed import unwrap
from memfit.runtime._guard_checks import check_callables, check_parts, default_loss
from memfit.runtime._incident import (
    Action,
    MemoryFacts,
    MicrobatchIncident,
    Phase,
    logger,
    memory_facts,
)
from memfit.runtime._report import optimizer_message, sharded_message, too_small_message
from memfit.runtime._sharded import CostFn, ShardedSplit, sharded_over_ranks
from memfit.runtime._split import SplitFn, batch_size, parts_needed, split_batch

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["AutoMicrobatch", "LossFn", "auto_microbatch"]

LossFn = Callable[[torch.nn.Module, Any], torch.Tensor]
Reduction = Literal["mean", "sum"]
_CODES: dict[Phase, int] = {"forward": 1, "backward": 2, "optimizer": 3}  # 0: no failure
_PHASE_OF: dict[int, Phase] = {code: phase for phase, code in _CODES.items()}


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class _Failure:
    """An attempt's out-of-memory error, reduced to plain facts (the frames are dropped)."""

    __slots__ = ("memory", "message", "phase")

    def __init__(self, phase: Phase, message: str, memory: MemoryFacts | None) -> None:
        self.phase = phase
        self.message = message
        self.memory = memory


class MicrobatchOptions(TypedDict, total=False):
    """:class:`AutoMicrobatch`'s keywords for how it splits, each described there."""

    split_fn: SplitFn | None
    size_fn: Callable[[Any], int] | None
    min_microbatch: int
    grow_after: int | None
    reduction: Reduction
    example_batch: Any
    microbatch_size: int | None
    cost_fn: CostFn | None
    keep_free: float | None


@dataclass(frozen=True)
class _Settings:
    """:class:`MicrobatchOptions` checked, with their defaults."""

    split_fn: SplitFn | None = None
    size_fn: Callable[[Any], int] | None = None
    min_microbatch: int = 1
    grow_after: int | None = 100
    reduction: Reduction = "mean"
    example_batch: Any = None
    microbatch_size: int | None = None
    cost_fn: CostFn | None = None
    keep_free: float | None = None

    @classmethod
    def of(cls, options: MicrobatchOptions) -> _Settings:
        unknown = set(options) - set(MicrobatchOptions.__annotations__)
        if unknown:
            raise InvalidInputError(
                f"AutoMicrobatch got unknown keyword(s) {', '.join(sorted(unknown))}; it takes "
                f"scaler, before_step, on_incident, {', '.join(MicrobatchOptions.__annotations__)}."
            )
        settings = cls(**options)
        settings.check()
        return settings

    def check(self) -> None:
        check_callables(split_fn=self.split_fn, size_fn=self.size_fn, cost_fn=self.cost_fn)
        if type(self.min_microbatch) is not int or self.min_microbatch < 1:
            raise InvalidInputError(
                f"min_microbatch={self.min_microbatch!r} is not accepted; give a whole number >= 1."
            )
        grow = self.grow_after
        if grow is not None and (type(grow) is not int or grow < 1):
            raise InvalidInputError(
                f"grow_after={grow!r} is not accepted; give a whole number of steps >= 1, "
                "or None to keep the smallest micro-batch size that worked."
            )
        size = self.microbatch_size
        if size is not None and (type(size) is not int or size < 1):
            raise InvalidInputError(
                f"microbatch_size={size!r} is not accepted; give the samples of a "
                "micro-batch to start with as a whole number >= 1, or None for whole batches."
            )
        if self.reduction not in ("mean", "sum"):
            raise InvalidInputError(
                f"reduction={self.reduction!r} is not accepted; give 'mean' (the loss is "
                "averaged over the batch's samples) or 'sum' (it is summed)."
            )


class AutoMicrobatch:
    """Run training steps that split the batch into micro-batches when CUDA runs out of memory.

    ``loss_fn(model, batch) -> loss`` computes the loss of a batch (of a micro-batch, when
    split); the guard runs the backward passes and the update. Without ``loss_fn`` the loss is
    ``model(**batch).loss`` for a mapping (Hugging Face models), else ``model(batch)``. For
    mixed precision, call ``torch.autocast`` inside ``loss_fn`` and pass the ``GradScaler``.

    * :meth:`step` (also ``guard(batch)``) is a whole update: clear the gradients, forward and
      backward over the micro-batches, ``before_step()`` if given (gradient clipping: the
      gradients are complete, and unscaled when there is a scaler), then ``optimizer.step()``
      (``scaler.step``/``update`` with a scaler). The gradients are left in place afterwards.
    * :meth:`backward_only` runs only the forward and backward passes and adds the batch's
      gradients to those already there, for loops that step the optimizer themselves.

    Both return the loss of the whole batch, detached. ``split_fn(batch, n)`` and
    ``size_fn(batch)`` replace the default split (tensors, dicts, tuples and lists along dim 0)
    for other batch types; a batch the guard cannot split is refused before anything runs (on
    ``example_batch`` at construction, then on each new batch type). ``min_microbatch`` is the
    smallest micro-batch tried; ``grow_after`` the clean steps before trying larger micro-batches
    again (``None``: never). ``microbatch_size`` starts split into micro-batches of at most
    that many samples (a planned accumulation, ``memfit.apply``) rather than with whole batches.
    ``reduction="sum"`` for a loss summed over the batch.
    ``on_incident`` receives each :class:`MicrobatchIncident`, which is also logged to the
    ``memfit.guard`` logger and kept in :attr:`incidents`.

    With ``DistributedDataParallel`` every rank retries together with the same micro-batch size
    (see ``memfit.runtime._distributed``); ``loss_fn`` is then given the wrapped module.
    With a model FSDP2 shards over several ranks nothing can be retried (a rank that fails
    mid-step leaves the others in a collective): the guard splits each batch before its step,
    every rank the same count, from the memory measured in earlier steps (see
    ``memfit.runtime._sharded``); ``keep_free`` is the share of the GPU (or of its memory
    fraction) kept free, default 5%, and ``cost_fn(batch) -> number`` what memory grows with
    (default: the rows and row length of the batch's largest tensor). Both are refused for other
    models.
    An out-of-memory error that splitting cannot fix (a micro-batch of ``min_microbatch``
    samples, or the optimizer step) raises :class:`memfit.UnrecoverableOOMError` with a memory
    report and what to change, after clearing the gradients.

    As a context manager it only logs a summary at exit: a ``with`` block cannot be run again,
    so the retrying happens in :meth:`step`.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        loss_fn: LossFn | None = None,
        *,
        scaler: torch.amp.GradScaler | None = None,
        before_step: Callable[[], object] | None = None,
        on_incident: Callable[[MicrobatchIncident], object] | None = None,
        **options: Unpack[MicrobatchOptions],
    ) -> None:
        check_parts(model, optimizer, loss_fn, scaler)
        check_callables(before_step=before_step, on_incident=on_incident)
        settings = _Settings.of(options)
        self.model = model
        self.optimizer = optimizer
        self.scaler = scaler
        self._module, self._comm = unwrap(model)
        self._sharded = _sharded_split(model, settings.cost_fn, settings.keep_free)
        self._looked = self._sharded is not None  # whether FSDP2 was looked for since
        self._loss_fn: LossFn = loss_fn or default_loss
        self._split_fn = settings.split_fn
        self._size_fn = settings.size_fn
        self._min = settings.min_microbatch
        self._grow_after = settings.grow_after
        self._reduction: Reduction = settings.reduction
        self._before_step = before_step
        self._on_incident = on_incident
        self._limit: int | None = settings.microbatch_size
        self._previous: int | None = None
        self._largest = 0
        self._clean = 0
        self._wait = settings.grow_after
        self._steps = 0
        self._biggest = 0
        self._phase: Phase = "forward"
        self._checked: set[type] = set()
        self.incidents: list[MicrobatchIncident] = []
        if settings.example_batch is not None:
            self._check(settings.example_batch)

    # -- public -------------------------------------------------------------------------------

    @property
    def microbatch_size(self) -> int | None:
        """The largest micro-batch (samples) currently used; ``None`` while batches run whole.
        Under FSDP2 (split before each step), the last step's."""
        if self._sharded is not None and self._steps:
            return self._biggest if self._sharded.last_parts > 1 else self._limit
        return self._limit

    @property
    def steps(self) -> int:
        """How many steps (``step`` or ``backward_only`` calls) have completed."""
        return self._steps

    @property
    def reduction(self) -> Reduction:
        return self._reduction

    def step(self, batch: Any) -> torch.Tensor:
        """Clear the gradients, run the batch (split if needed), step the optimizer."""
        if self.optimizer is None:
            raise InvalidInputError(
                "AutoMicrobatch.step needs the optimizer: give it as AutoMicrobatch(model, "
                "optimizer, ...), or call backward_only(batch) and step the optimizer yourself."
            )
        n = self._check(batch)
        self._clear_gradients()
        loss = self._accumulate(batch, n)
        self._optimizer_step(self.optimizer, n)
        self._steps += 1
        return loss

    __call__ = step

    def backward_only(self, batch: Any) -> torch.Tensor:
        """Run the batch's forward and backward passes, adding to the gradients already there.

        The gradients present on entry are set aside while the batch runs, so a failed attempt
        discards only its own contribution (this holds one extra copy of them meanwhile).
        """
        n = self._check(batch)
        params = list(self._module.parameters())
        kept = [p.grad for p in params]
        for p in params:
            p.grad = None
        try:
            loss = self._accumulate(batch, n)
        except BaseException:
            for p, grad in zip(params, kept, strict=True):
                p.grad = grad
            raise
        for p, grad in zip(params, kept, strict=True):
            if grad is not None:
                p.grad = grad if p.grad is None else p.grad.add_(grad)
        self._steps += 1
        return loss

    def __enter__(self) -> AutoMicrobatch:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.incidents:
            logger.info(
                "AutoMicrobatch: %d out-of-memory incidents in %d steps; micro-batch size now %s",
                len(self.incidents),
                self._steps,
                self._limit if self._limit is not None else "whole batches",
            )

    def __repr__(self) -> str:
        size = self._limit if self._limit is not None else "whole batches"
        count = len(self.incidents)
        return f"<AutoMicrobatch micro-batch {size}, {self._steps} steps, {count} incidents>"

    # -- batches ------------------------------------------------------------------------------

    def _size(self, batch: Any) -> int:
        if self._size_fn is None:
            return batch_size(batch)
        n = self._size_fn(batch)
        if type(n) is not int or n < 0:
            raise InvalidInputError(
                f"size_fn returned {n!r} for a {type(batch).__name__} batch; it must return the "
                "number of samples as a whole number >= 0."
            )
        return n

    def _check(self, batch: Any) -> int:
        """The batch's size; refuses, before anything runs, a batch that cannot be split."""
        n = self._size(batch)
        if n < 1:
            raise InvalidInputError("The batch is empty (0 samples); give at least one sample.")
        if type(batch) not in self._checked:
            if self._split_fn is None:
                split_batch(batch, min(n, 2))  # views: checks the containers can be rebuilt
            self._checked.add(type(batch))
        return n

    def _split(self, batch: Any, n: int, parts: int) -> tuple[list[Any], list[int]]:
        if parts == 1:
            return [batch], [n]
        if self._split_fn is None:
            chunks = split_batch(batch, parts)
        else:
            chunks = list(self._split_fn(batch, parts))
        sizes = [self._size(c) for c in chunks]
        if sum(sizes) != n:
            raise InvalidInputError(
                f"split_fn returned micro-batches of {sizes} samples for a batch of {n}: "
                "together they must hold every sample exactly once."
            )
        return chunks, sizes

    # -- the attempts -------------------------------------------------------------------------

    def _backward(self, loss: torch.Tensor) -> None:
        """Backward of one micro-batch's share of the loss (integrations override it)."""
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def _run(self, chunks: list[Any], sizes: list[int], n: int) -> torch.Tensor:
        total: torch.Tensor | None = None
        for chunk, size in zip(chunks, sizes, strict=True):
            if size == 0:
                continue
            share = 1.0 if len(chunks) == 1 or self._reduction == "sum" else size / n
            watch = self._sharded.watch(chunk) if self._sharded else contextlib.nullcontext()
            with watch:
                self._phase = "forward"
                loss = self._loss_fn(self._module, chunk)
                if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
                    raise InvalidInputError(
                        "loss_fn must return the loss as a scalar tensor; it returned "
                        f"{type(loss).__name__} {tuple(getattr(loss, 'shape', ()))}."
                    )
                self._phase = "backward"
                self._backward(loss if share == 1.0 else loss * share)
            part = loss.detach() if share == 1.0 else loss.detach() * share
            total = part if total is None else total + part
        if total is None:
            raise InvalidInputError("Every micro-batch was empty; give at least one sample.")
        return total

    def _attempt(
        self, batch: Any, n: int, limit: int | None
    ) -> tuple[torch.Tensor | None, _Failure | None, int]:
        parts = parts_needed(n, limit)
        chunks, sizes = self._split(batch, n, parts)
        try:
            return self._run(chunks, sizes, n), None, max(sizes)
        except torch.OutOfMemoryError as exc:
            # taken while the attempt's tensors are alive: the memory at the failure
            failure = _Failure(self._phase, _first_line(exc), self._memory())
            exc.__traceback__ = None  # its frames hold the activations
            return None, failure, max(sizes)

    def _memory(self) -> MemoryFacts | None:
        return memory_facts(list(self._module.parameters()), self.optimizer)

    def _clear_gradients(self) -> None:
        for p in self._module.parameters():
            p.grad = None

    def _release(self) -> None:
        """Drop what a failed attempt left: gradients, reference cycles, cached CUDA blocks."""
        self._clear_gradients()
        gc.collect()
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()

    def _agree(self, failure: _Failure | None, n: int) -> tuple[int, int]:
        code = 0 if failure is None else _CODES[failure.phase]
        if self._comm is None:
            return code, n
        code, largest = self._comm.max_ints([code, n])
        return code, largest

    def _accumulate(self, batch: Any, n: int) -> torch.Tensor:
        if not self._looked:
            # a model sharded after the guard was built (memfit.apply, then fully_shard, as a
            # plan for FSDP2 says): split ahead there too, never retry mid-step
            self._looked = True
            if self._comm is None and sharded_over_ranks(self.model):
                self._sharded = ShardedSplit(self.model, None, None)
        if self._sharded is not None:
            return self._accumulate_sharded(self._sharded, batch, n)
        if self._comm is not None:
            self._comm.broadcast_buffers()
        growing = self._limit is not None and self._wait is not None and self._clean >= self._wait
        limit = 2 * self._limit if growing and self._limit is not None else self._limit
        retried = False
        while True:
            loss, failure, biggest = self._attempt(batch, n, limit)
            self._biggest = biggest
            code, largest = self._agree(failure, n)
            self._largest = max(self._largest, largest)
            if code == 0 and loss is not None:
                if self._comm is not None:
                    self._comm.average_gradients(list(self._module.parameters()))
                self._succeeded(limit, growing, retried)
                return loss
            del loss
            self._release()
            limit = self._failed(code, failure, n, biggest, limit, largest, growing)
            growing, retried = False, True

    def _accumulate_sharded(self, sharded: ShardedSplit, batch: Any, n: int) -> torch.Tensor:
        """FSDP2: the micro-batch count agreed before the step, no retry (``_sharded``)."""
        first = not sharded.measured
        most = n // self._min  # micro-batches of at least min_microbatch samples
        parts = sharded.parts(batch, n, parts_needed(n, self._limit), self._split, most)
        chunks, sizes = self._split(batch, n, parts)
        if 0 in sizes:
            raise InvalidInputError(
                f"split_fn returned an empty micro-batch ({sizes} samples): under FSDP2 every "
                "rank runs each micro-batch's forward and backward together, so none may be "
                "empty."
            )
        self._biggest = max(sizes)
        sharded.begin_step()
        try:
            return self._run(chunks, sizes, n)
        except torch.OutOfMemoryError as exc:
            failure = _Failure(self._phase, _first_line(exc), self._memory())
            exc.__traceback__ = None  # its frames hold the activations
        self._release()
        code = _CODES[failure.phase]
        incident = self._record(code, failure, n, self._biggest, None, "fatal")
        raise UnrecoverableOOMError(sharded_message(incident, parts, first), incident)

    def _succeeded(self, limit: int | None, growing: bool, retried: bool) -> None:
        if not growing:
            if self._limit is not None and not retried:
                self._clean += 1  # a step that ran out of memory first is not a clean one
            return
        self._clean = 0
        self._limit = None if limit is None or limit >= self._largest else limit
        logger.info(
            "AutoMicrobatch: micro-batches of %s fit again at step %d",
            self._limit or "whole batches",
            self._steps,
        )

    def _failed(
        self,
        code: int,
        failure: _Failure | None,
        n: int,
        biggest: int,
        limit: int | None,
        largest: int,
        growing: bool,
    ) -> int:
        """Choose the next micro-batch size after a failed attempt; raise when none is left."""
        self._clean = 0
        action: Action
        if growing and self._limit is not None:
            new: int | None = self._limit
            action = "restore"
            self._wait = None if self._wait is None else 2 * self._wait
        else:
            current = largest if limit is None else min(limit, largest)
            new = None if current <= self._min else max(self._min, math.ceil(current / 2))
            action = "split" if new is not None else "fatal"
        incident = self._record(code, failure, n, biggest, new, action)
        if new is None:
            raise UnrecoverableOOMError(too_small_message(incident, self._min, growing), incident)
        self._limit = new
        return new

    def _record(
        self,
        code: int,
        failure: _Failure | None,
        n: int,
        biggest: int,
        after: int | None,
        action: Action,
    ) -> MicrobatchIncident:
        incident = MicrobatchIncident(
            step=self._steps,
            phase=_PHASE_OF[code],
            here=failure is not None,
            batch_size=n,
            microbatch_before=biggest,
            microbatch_after=after,
            action=action,
            memory=failure.memory if failure is not None else None,
            message=failure.message if failure is not None else "another rank ran out of memory",
        )
        self.incidents.append(incident)
        (logger.error if action == "fatal" else logger.warning)("%s", incident.text())
        if self._on_incident is not None:
            self._on_incident(incident)
        return incident

    # -- the update ---------------------------------------------------------------------------

    def _update(self, optimizer: torch.optim.Optimizer) -> None:
        self._phase = "optimizer"
        if self._before_step is not None:
            if self.scaler is not None:
                self.scaler.unscale_(optimizer)
            self._before_step()
        if self.scaler is not None:
            self.scaler.step(optimizer)
            self.scaler.update()
        else:
            optimizer.step()

    def _optimizer_step(self, optimizer: torch.optim.Optimizer, n: int) -> None:
        failure: _Failure | None = None
        try:
            self._update(optimizer)
        except torch.OutOfMemoryError as exc:
            failure = _Failure("optimizer", _first_line(exc), self._memory())
            exc.__traceback__ = None
        code = 0 if failure is None else _CODES["optimizer"]
        agree = self._comm or self._sharded
        if agree is not None:
            code = agree.max_ints([code])[0]
        if code == 0:
            return
        self._release()
        if self.scaler is not None:
            # forget this step's unscale_/inf checks, as update() would, without changing the scale
            getattr(self.scaler, "_per_optimizer_states", {}).clear()
        incident = self._record(code, failure, n, self._biggest, None, "fatal")
        raise UnrecoverableOOMError(optimizer_message(incident, type(optimizer).__name__), incident)


def _sharded_split(
    model: torch.nn.Module, cost_fn: CostFn | None, keep_free: float | None
) -> ShardedSplit | None:
    """The split ahead of each step for a model FSDP2 shards over several ranks; refuses its
    options for any other model rather than ignore them."""
    if sharded_over_ranks(model):
        return ShardedSplit(model, cost_fn, keep_free)
    given = [name for name, v in (("cost_fn", cost_fn), ("keep_free", keep_free)) if v is not None]
    if given:
        raise InvalidInputError(
            f"{' and '.join(given)} {'is' if len(given) == 1 else 'are'} used only for a model "
            "FSDP2 shards over several ranks, which this is not: there the guard splits batches "
            "before each step from measured memory; elsewhere it splits after an out-of-memory "
            "error. Leave them out, or build the guard after fully_shard."
        )
    return None


def auto_microbatch(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    **options: Any,
) -> Callable[[LossFn], AutoMicrobatch]:
    """Decorator form: turn ``loss_fn(model, batch)`` into a guarded step ``f(batch) -> loss``.

    ::

        @memfit.auto_microbatch(model, optimizer, grow_after=50)
        def train_step(model, batch):
            return F.cross_entropy(model(batch["x"]), batch["y"])

        loss = train_step(batch)  # AutoMicrobatch.step: split on OOM, then optimizer.step()

    ``options`` are :class:`AutoMicrobatch`'s keyword arguments. The function receives the model
    to run (under DDP the wrapped module), so it should use that argument, not a global.
    """

    def wrap(fn: LossFn) -> AutoMicrobatch:
        return AutoMicrobatch(model, optimizer, fn, **options)

    return wrap
