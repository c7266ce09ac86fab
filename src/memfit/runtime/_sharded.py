"""The guard for a model FSDP2 shards over several ranks: batches split before the step, agreed.

FSDP2 all-gathers each sharded module's parameters in its forward and reduce-scatters its
gradients in its backward, so every rank must run the same number of forward and backward
passes, and a rank that runs out of memory in the middle of one leaves the others waiting in a
collective it never joins. The retry the DDP guard makes after an out-of-memory error
(``memfit.runtime._distributed``) is therefore impossible: no rank can learn in time that
another failed. So under FSDP2 the guard splits a batch *before* its step, from what it has
measured:

1. After each micro-batch, its **rise**: the peak of allocated memory during it over what
   was allocated when it began (activations, the parameters FSDP2 gathered, the reduce-scatter
   buffers, the gradients it created), and what stays allocated after it over the step's start
   (the gradients, kept from one micro-batch to the next). Its **size**: by default the rows
   and the elements per row of its largest tensor (samples, and tokens or pixels a sample);
   ``cost_fn`` gives one number instead, which memory must grow in proportion to at most.
2. A micro-batch of ``rows`` rows of ``row`` elements is bounded by what stays (the most seen)
   plus each measured rise ``(rows_o, row_o, r_o)`` scaled to ``r_o * max(1, rows / rows_o *
   s)``, where ``s`` is ``(row / row_o) ** 2`` for longer rows and 1 otherwise. That holds when
   the rise is a constant plus the rows times what a row takes, and a row takes no less memory
   when shorter and at most the square of its length more when longer (attention that keeps
   its scores, as SDPA's math kernel does). So the first batch longer than any measured is
   split finely; once it has run, its own measurement bounds the next. The tightest bound is
   used. What stays is added because a micro-batch after the first runs beside the gradients
   the first made: on an H200 a transformer's later micro-batches peaked 67-71 MB above its
   first, and its gradients are 67 MB.
3. Each rank takes the fewest micro-batches whose largest is bounded within its room (free
   device memory and its own cache, within ``set_per_process_memory_fraction``'s cap, less
   ``keep_free`` of the device or of that cap), and all ranks then run the largest count any
   rank needs (one all-reduce of three integers per step, over each dimension of the model's
   mesh), never more than every rank can run (its samples, fewer with ``min_microbatch``).

The first step has nothing measured: it runs whole, or in micro-batches of ``microbatch_size``
(a plan's, or one ``memfit.estimate(..., strategy="fsdp2")`` says fits). An out-of-memory error
is never retried: the guard raises :class:`memfit.UnrecoverableOOMError` on that rank, which
ends the job (torchrun stops the other ranks).

The guard measures with ``torch.cuda.reset_peak_memory_stats`` at each micro-batch, so
``torch.cuda.max_memory_allocated`` read after a step is its last micro-batch's peak;
:attr:`ShardedSplit.last_peak` keeps the step's.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch.utils._pytree import tree_leaves

from memfit._errors import InvalidInputError
from memfit.runtime._distributed import all_max

__all__ = [
    "CostFn",
    "Meter",
    "ShardedSplit",
    "Splitter",
    "largest_rows",
    "meter_for",
    "sharded_over_ranks",
]

logger = logging.getLogger("memfit.guard")

CostFn = Callable[[Any], float]
# (batch, samples, parts) -> (micro-batches, their samples): the guard's own split
Splitter = Callable[[Any, int, int], tuple[list[Any], list[int]]]
DEFAULT_KEEP_FREE = 0.05
_KEPT = 256  # the measured micro-batches kept (the newest)


def sharded_over_ranks(model: torch.nn.Module) -> bool:
    """Whether ``model`` holds a module FSDP2 shards, in a job of more than one rank."""
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return False
    from torch.distributed.fsdp import FSDPModule

    return any(isinstance(m, FSDPModule) for m in model.modules())


def largest_rows(batch: Any) -> tuple[float, float]:
    """The default size of a (micro-)batch: its largest tensor's rows and elements per row."""
    tensors = [t for t in tree_leaves(batch) if isinstance(t, torch.Tensor) and t.dim() > 0]
    if not tensors:
        return 0.0, 1.0
    largest = max(tensors, key=lambda t: t.numel())
    rows = largest.shape[0]
    return float(rows), largest.numel() / rows if rows else 1.0


class Meter(Protocol):
    """Where the guard reads memory: the room a step has, and each micro-batch's rise."""

    def room(self) -> int:
        """Bytes a step may add to what is allocated now."""
        ...

    def begin_step(self) -> None: ...

    def begin(self) -> None: ...

    def reading(self) -> tuple[int, int, int]:
        """Over what was allocated at :meth:`begin_step`: what was allocated at :meth:`begin`,
        the peak since, and what is allocated now."""
        ...


class CudaMeter:
    """The CUDA caching allocator's counters of one device."""

    def __init__(self, device: torch.device, keep_free: float) -> None:
        self.device = device
        self.keep_free = keep_free
        self._base = 0
        self._start = 0

    def room(self) -> int:
        free, total = torch.cuda.mem_get_info(self.device)
        limit = total
        fraction = getattr(torch.cuda, "get_per_process_memory_fraction", None)
        if fraction is not None:  # set_per_process_memory_fraction caps what may be reserved
            limit = min(total, int(fraction(self.device) * total))
        reserved = torch.cuda.memory_reserved(self.device)
        reachable = min(free + reserved, limit)
        allocated = torch.cuda.memory_allocated(self.device)
        return reachable - allocated - int(self.keep_free * limit)

    def begin_step(self) -> None:
        self._base = torch.cuda.memory_allocated(self.device)

    def begin(self) -> None:
        torch.cuda.reset_peak_memory_stats(self.device)
        self._start = torch.cuda.memory_allocated(self.device)

    def reading(self) -> tuple[int, int, int]:
        peak = torch.cuda.max_memory_allocated(self.device)
        now = torch.cuda.memory_allocated(self.device)
        return self._start - self._base, peak - self._base, now - self._base


def meter_for(device: torch.device, keep_free: float) -> Meter | None:
    """The meter of ``device``; ``None`` off CUDA (nothing to measure: only ``microbatch_size``
    splits)."""
    if device.type != "cuda":
        return None
    return CudaMeter(device, keep_free)


def _device_of(model: torch.nn.Module) -> torch.device:
    for p in model.parameters():
        local = getattr(p, "_local_tensor", p)
        return torch.device(local.device)
    return torch.device("cpu")


def _groups_of(model: torch.nn.Module) -> list[Any]:
    """The process groups of the mesh FSDP2 shards ``model`` over, one per mesh dimension
    (shard, and replicate under HSDP): the ranks that run its collectives, and so must agree.
    The default group where no parameter is a DTensor on a mesh."""
    for p in model.parameters():
        mesh = getattr(p, "device_mesh", None)
        if mesh is not None:
            return [mesh.get_group(dim) for dim in range(mesh.ndim)]
    return [None]


class ShardedSplit:
    """Chooses each step's micro-batch count, the same on every rank, from measured rises."""

    def __init__(
        self,
        model: torch.nn.Module,
        cost_fn: CostFn | None,
        keep_free: float | None,
    ) -> None:
        if keep_free is not None and (
            isinstance(keep_free, bool)
            or not isinstance(keep_free, (int, float))
            or not 0 <= keep_free < 0.5
        ):
            raise InvalidInputError(
                f"keep_free={keep_free!r} is not a share of the GPU between 0 and 0.5: give e.g. "
                f"keep_free=0.05 ({DEFAULT_KEEP_FREE:.0%} of the device kept free, the default)."
            )
        self.cost_fn = cost_fn
        self.keep_free = DEFAULT_KEEP_FREE if keep_free is None else float(keep_free)
        self.device = _device_of(model)
        self.groups = _groups_of(model)
        self.meter = meter_for(self.device, self.keep_free)
        # (rows, elements a row, its own rise over its start) of the micro-batches that ran
        self.measured: list[tuple[float, float, int]] = []
        # what stays allocated from one micro-batch to the next (the gradients), the most seen
        self.kept = 0
        self.last_peak = 0  # the last step's largest rise, bytes over its start
        self.last_parts = 1

    # -- the collectives ----------------------------------------------------------------------

    def max_ints(self, values: list[int]) -> list[int]:
        """The element-wise maximum of ``values`` over the ranks of the model's mesh."""
        return all_max(values, self.device, self.groups)

    # -- the bound ----------------------------------------------------------------------------

    def size(self, chunk: Any) -> tuple[float, float]:
        """A micro-batch's rows and elements per row (``cost_fn``'s number and 1)."""
        if self.cost_fn is None:
            return largest_rows(chunk)
        value = self.cost_fn(chunk)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise InvalidInputError(
                f"cost_fn returned {value!r}; it must return a number >= 0 that grows with the "
                "memory a micro-batch takes (e.g. its tokens)."
            )
        return float(value), 1.0

    def bound(self, rows: float, row: float = 1.0) -> int | None:
        """The largest rise a micro-batch of ``rows`` rows of ``row`` elements is expected to
        reach; ``None`` before anything was measured."""
        if not self.measured:
            return None
        return self.kept + min(
            math.ceil(r * max(1.0, rows / seen_rows * _longer(row, seen_row)))
            for seen_rows, seen_row, r in self.measured
        )

    def _fits(self, batch: Any, n: int, parts: int, split: Splitter, room: int) -> bool:
        chunks, _ = split(batch, n, parts)
        bound = max((self.bound(*self.size(c)) or 0) for c in chunks)
        return bound <= room

    def _needed(
        self, batch: Any, n: int, least: int, most: int, split: Splitter
    ) -> tuple[int, bool]:
        """The fewest parts (``least`` to ``most``) whose largest is bounded within the room,
        and whether those fit (``most`` that do not, where none do)."""
        if self.meter is None or not self.measured:
            return least, True
        room = self.meter.room()
        if self._fits(batch, n, least, split, room):
            return least, True
        if least >= most or not self._fits(batch, n, most, split, room):
            return most, False
        low, high = least, most  # low does not fit, high does
        while high - low > 1:
            middle = (low + high) // 2
            if self._fits(batch, n, middle, split, room):
                high = middle
            else:
                low = middle
        return high, True

    def parts(self, batch: Any, n: int, least: int, split: Splitter, most: int) -> int:
        """This step's micro-batch count, agreed by every rank: at least ``least`` and, on
        every rank, at most its ``most`` (its samples, fewer with a smallest micro-batch)."""
        most = max(1, min(most, n))
        needed, fits = self._needed(batch, n, min(least, most), most, split)
        agreed, negative, over = self.max_ints([needed, -most, int(not fits)])
        fewest = -negative  # the most micro-batches every rank can run
        if agreed > fewest or over:
            logger.warning(
                "AutoMicrobatch (FSDP2): by the memory measured so far a rank needs %d "
                "micro-batches%s, but every rank can run only %d (its samples, or "
                "min_microbatch): running %d, which may run out of memory",
                agreed,
                " or more" if over else "",
                fewest,
                min(agreed, fewest),
            )
        parts = min(agreed, fewest)
        if parts > least:
            logger.info(
                "AutoMicrobatch (FSDP2): a batch of %d samples here runs in %d micro-batches "
                "(%d needed on this rank)",
                n,
                parts,
                needed,
            )
        self.last_parts = parts
        return parts

    # -- the measurements ---------------------------------------------------------------------

    def begin_step(self) -> None:
        self.last_peak = 0
        if self.meter is not None:
            self.meter.begin_step()

    @contextlib.contextmanager
    def watch(self, chunk: Any) -> Iterator[None]:
        """Measure one micro-batch's forward and backward (kept only when both ran)."""
        if self.meter is None:
            yield
            return
        self.meter.begin()
        yield
        start, peak, now = self.meter.reading()
        self.last_peak = max(self.last_peak, peak)
        self.kept = max(self.kept, now)
        rows, row = self.size(chunk)
        if rows > 0 and row > 0:
            self.measured.append((rows, row, peak - start))
            del self.measured[:-_KEPT]


def _longer(row: float, seen: float) -> float:
    """What a row of ``row`` elements may take over one of ``seen``: up to the square of the
    length where longer, no less where shorter."""
    return max(1.0, row / seen) ** 2
