"""The GPU half of the batch-size finder: confirm the estimator's proposal in few trials.

A trial runs the real step (fresh model and optimizer, the workload's steps) at one batch
size. The runner is a plain function ``batch_size -> TrialRun`` so that the decisions here are
tested on the CPU with scripted outcomes; :func:`cuda_runner` is the real one.

Decisions, at most ``max_trials`` trials:

* the proposal fits (no out-of-memory error and measured ``peak_reserved`` plus the CUDA
  context within the budget): keep it. If the estimate was high by enough that the corrected
  curve admits a batch at least ``STEP_UP_GAIN`` larger, try that one once.
* it does not fit: shift the predicted curve by the error seen (exactly, when the trial ran
  and only overshot the budget; from the free memory after an out-of-memory error otherwise,
  plus the margin) and try the largest batch under the shifted curve.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from memfit._errors import DoesNotFitError
from memfit._units import format_bytes
from memfit.runtime._bs_search import EstimateSearch
from memfit.workload import Workload

__all__ = ["STEP_UP_GAIN", "Trial", "TrialRun", "cuda_runner", "run_trials"]

# a trial costs as much as the real steps; a larger batch is worth one only from this gain
STEP_UP_GAIN = 0.02
_OOM_MARKERS = ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED")


@dataclass(frozen=True)
class TrialRun:
    """What one trial observed. ``capacity`` is what this process's allocator could hold
    after the trial (free memory plus reserved), ``None`` where unknown."""

    out_of_memory: bool
    peak_reserved: int  # max_memory_reserved(), up to the failure on an out-of-memory error
    peak_allocated: int
    seconds: float
    capacity: int | None = None
    message: str = ""
    alloc_retries: int | None = None  # times the allocator freed its cache and retried


@dataclass(frozen=True)
class Trial:
    """One trial as the result reports it."""

    batch_size: int
    fits: bool
    outcome: str  # "fits", "over budget" or "out of memory"
    predicted_reserved: int
    peak_reserved: int
    peak_allocated: int
    seconds: float
    alloc_retries: int | None = None  # measured: times the allocator freed its cache

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_trials(
    search: EstimateSearch,
    proposal: int,
    budget: int,
    runner: Callable[[int], TrialRun],
    *,
    margin: int,
    max_trials: int,
) -> tuple[int, list[Trial]]:
    """Confirm ``proposal`` on the GPU; returns the largest batch that fitted and the trials.

    ``budget`` bounds ``peak_reserved`` plus the CUDA context, as the search's totals do.
    Raises :class:`DoesNotFitError` when no trial fits.
    """
    trials: list[Trial] = []
    best, failed_below = 0, search.max_batch + 1
    batch, shift = proposal, 0
    while batch and len(trials) < max_trials:
        point = search.point(batch)
        context = point.context
        run = runner(batch)
        over = run.peak_reserved + context > budget
        fits = not run.out_of_memory and not over
        outcome = "fits" if fits else "out of memory" if run.out_of_memory else "over budget"
        trials.append(
            Trial(
                batch,
                fits,
                outcome,
                point.need,
                run.peak_reserved,
                run.peak_allocated,
                run.seconds,
                run.alloc_retries,
            )
        )
        if fits:
            best = max(best, batch)
            slack = point.need - run.peak_reserved  # > 0: the estimate was high
            # estimates cost time too: search for a larger batch only if the line says the
            # slack is worth the gain (an exact curve stays a search away)
            per_sample = search.per_sample()
            worth = slack > 0 and (per_sample == 0 or slack >= per_sample * batch * STEP_UP_GAIN)
            larger = search.largest_fitting(budget + slack) if worth else 0
            if best < failed_below - search.multiple_of and larger >= batch * (1 + STEP_UP_GAIN):
                batch = min(larger, failed_below - search.multiple_of)
                continue
            break
        failed_below = min(failed_below, batch)
        if best:
            break  # a step up failed: the last batch that fitted stands
        shift = _shift_after_failure(run, point.need, context, budget, margin, shift)
        batch = min(search.largest_fitting(budget - shift), batch - search.multiple_of)
    if not best:
        raise DoesNotFitError(_nothing_fitted(trials, budget))
    return best, trials


def _shift_after_failure(
    run: TrialRun, predicted: int, context: int, budget: int, margin: int, previous: int
) -> int:
    """How far above the estimate the real curve lies, as far as a failed trial tells."""
    if not run.out_of_memory:
        # the step ran: its peak is known exactly, and the error with it
        return max(run.peak_reserved - predicted, previous)
    if run.capacity is None:
        return max(2 * previous, margin)
    # the device had less room than the estimate needed: lower the target below the room
    # it really has (other processes, a larger context) and below the estimate by the error
    room = run.capacity + context
    return max(budget - room, 0) + max(room - (predicted + context), 0) + margin


def _nothing_fitted(trials: list[Trial], budget: int) -> str:
    tried = ", ".join(
        f"{t.batch_size} ({t.outcome}, predicted {format_bytes(t.predicted_reserved)}"
        f", measured {format_bytes(t.peak_reserved)})"
        for t in trials
    )
    return (
        f"No batch size tried fits the budget of {format_bytes(budget)} on this GPU: {tried}. "
        "The real step needs more than the estimate says here; another process may hold "
        "memory on the GPU (see nvidia-smi). Give a larger margin= (or --margin), more "
        "max_trials=, or confirm=False to get the estimate alone."
    )


def cuda_runner(workload_at: Callable[[int], Workload], cap: int) -> Callable[[int], TrialRun]:
    """A runner that runs the workload at a batch size on the current CUDA device, with the
    caching allocator held to ``cap`` bytes (``set_per_process_memory_fraction``): the budget
    less the CUDA context. Under the cap the allocator frees its cache and retries before it
    gives up, as it does when a GPU is full, so a trial that runs fits the budget.

    Each trial builds a fresh model and optimizer (:func:`memfit.estimator._measure.measure`, as
    ``memfit validate`` does) and leaves the device as it found it, the caller's memory
    fraction restored. fp32 products run at the caller's precision: in TF32 a trial ran in a
    half to a third of the time, but cuBLAS then picks other kernels and the peaks differ
    (BERT-base on an H100, torch 2.11: 256 KiB less allocated, 21 MB more reserved).
    """
    import torch

    from memfit.estimator import measure

    device_total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    fraction = min(1.0, max(cap, 0) / device_total)

    def run(batch_size: int) -> TrialRun:
        start = time.perf_counter()
        message = ""
        prior_fraction = _memory_fraction(torch)
        retries_before = torch.cuda.memory_stats().get("num_alloc_retries", 0)
        try:
            # a caller's smaller fraction stands
            torch.cuda.set_per_process_memory_fraction(min(fraction, prior_fraction))
            measured, _ = measure(workload_at(batch_size))
            peak_reserved, peak_allocated = measured.peak_reserved, measured.peak_allocated
        except RuntimeError as exc:  # torch.OutOfMemoryError derives from RuntimeError
            if not any(m in str(exc) for m in _OOM_MARKERS):
                raise
            message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            peak_reserved = torch.cuda.max_memory_reserved()
            peak_allocated = torch.cuda.max_memory_allocated()
            exc.__traceback__ = None  # the frames hold the trial's tensors
        finally:
            torch.cuda.set_per_process_memory_fraction(prior_fraction)
        seconds = time.perf_counter() - start
        retries = torch.cuda.memory_stats().get("num_alloc_retries", 0) - retries_before
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        free, _ = torch.cuda.mem_get_info()
        room = free + torch.cuda.memory_reserved()
        return TrialRun(
            bool(message),
            peak_reserved,
            peak_allocated,
            seconds,
            capacity=min(room, int(fraction * device_total)),
            message=message,
            alloc_retries=retries,
        )

    return run


def _memory_fraction(torch: Any) -> float:
    """The caller's per-process memory fraction (1.0 where torch cannot tell)."""
    getter = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    if getter is None:
        return 1.0
    try:
        return float(getter())
    except (RuntimeError, TypeError):
        return 1.0
