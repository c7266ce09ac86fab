"""``memfit.find_batch_size``: the largest batch that fits, from the estimator, confirmed in
few GPU trials.

Step 1 runs on the CPU: a search over estimates (:mod:`memfit.runtime._bs_search`) finds the
largest batch whose predicted need (the least reserved memory the step runs in, as the caching
allocator frees its cache under pressure: ``estimator._pressure``, plus the CUDA context) stays
under the budget: the GPU's memory minus a margin. Once two batch sizes are traced, the others
are replayed from a batch model where one fits (``estimator.BatchEstimates``); the answer is
always traced. Step 2, when asked, runs that batch on the
GPU, held to the budget, and corrects it in at most ``max_trials`` trials
(:mod:`memfit.runtime._bs_trials`).
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from memfit._display import html_repr
from memfit._errors import DoesNotFitError, InvalidInputError, NoGPUError
from memfit._gpus import GPU, resolve_gpu
from memfit._units import GiB, format_bytes, parse_size
from memfit.advice import StepSettings, does_not_fit_message
from memfit.estimator import BatchEstimates, Estimate, local_gpu
from memfit.runtime._bs_search import EstimateSearch, Point
from memfit.runtime._bs_trials import Trial, cuda_runner, run_trials
from memfit.workload import WorkloadOptions, make_workload

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["BatchSizeResult", "find_batch_size"]

DEFAULT_MARGIN = 0.02  # of the GPU's memory; see resolve_margin
Batch = Any


@dataclass(frozen=True)
class BatchSizeResult:
    """The batch size found, what was predicted for it, and what it cost to find.

    Sizes are int bytes. ``budget`` bounds the predicted (and, for trials, measured) peak
    reserved memory plus the CUDA context; it is the GPU's memory less ``margin``.
    """

    batch_size: int
    confirmed: bool  # a GPU trial ran this batch size within the budget
    gpu: str
    gpu_total: int
    budget: int
    margin: int
    predicted_peak_reserved: int  # with memory to spare (the allocator keeps its cache)
    predicted_peak_allocated: int
    predicted_need: int  # the least reserved memory the step runs in (estimator._pressure)
    predicted_total: int  # predicted need + CUDA context
    # times the allocator is predicted to free its cache and retry over the steps, held to the
    # budget: > 0 means the batch fits only because it does (each costs a device sync and
    # cudaFree/cudaMalloc calls: slower steps); None where unknown
    predicted_alloc_retries: int | None
    per_sample: int  # predicted bytes per extra sample, between the farthest estimates
    limited_by: str  # "memory" or "max_batch"
    estimates: list[Point] = field(default_factory=list)
    trials: list[Trial] = field(default_factory=list)
    estimate_seconds: float = 0.0
    total_seconds: float = 0.0
    # the batch sizes the estimates traced, and those replayed through the allocator from a
    # batch model's derived traces (the answer is always traced); with how, in a sentence
    traced: list[int] = field(default_factory=list)
    replayed: list[int] = field(default_factory=list)
    batch_model: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["units"] = "bytes"
        data["estimates"] = [asdict(p) for p in self.estimates]
        data["trials"] = [t.to_dict() for t in self.trials]
        return data

    def to_json(self, *, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def __repr__(self) -> str:
        """One line; the estimates and trials only counted (``.estimates``, ``.trials``)."""
        return (
            f"BatchSizeResult(batch_size={self.batch_size}, confirmed={self.confirmed}, "
            f"gpu={self.gpu!r}, predicted_total={self.predicted_total} "
            f"({self.predicted_total / GiB:.2f} GiB), budget={self.budget} "
            f"({self.budget / GiB:.2f} GiB), limited_by={self.limited_by!r}, "
            f"estimates=[{len(self.estimates)} points], trials=[{len(self.trials)} trials])"
        )

    def _repr_html_(self) -> str | None:
        """The search as HTML where a notebook shows it (``memfit.report`` renders it: the
        answer and its budget, the chart, every estimate and GPU trial)."""
        return html_repr("batch_size", self)

    def __str__(self) -> str:
        how = f"confirmed in {len(self.trials)} GPU trial(s)" if self.confirmed else "estimated"
        note = self.pressure_note()
        return (
            f"batch size {self.batch_size} ({how}): needs {format_bytes(self.predicted_need)} "
            f"reserved ({format_bytes(self.predicted_peak_reserved)} with memory to spare), "
            f"{format_bytes(self.predicted_total)} with the CUDA context, "
            f"budget {format_bytes(self.budget)} on {self.gpu}" + (f"; it {note}" if note else "")
        )

    def pressure_note(self) -> str:
        """Why the batch may run slower: it fits only because the allocator frees its cache
        (a phrase: "fits only because ..."); empty when it does not need to."""
        if not self.predicted_alloc_retries:
            return ""
        return (
            f"fits only because the allocator frees its cache and retries "
            f"({self.predicted_alloc_retries} times over the estimated steps): each costs a "
            "device synchronisation and cudaFree/cudaMalloc calls, so steps run slower than "
            "at a batch whose peak reserved fits"
        )


def find_batch_size(
    model: nn.Module | Callable[[], nn.Module] | str,
    make_batch: Callable[[int], Batch] | None = None,
    *,
    margin: float | int | str = DEFAULT_MARGIN,
    max_batch: int = 8192,
    multiple_of: int = 1,
    confirm: bool = True,
    max_trials: int = 3,
    **options: Unpack[WorkloadOptions],
) -> BatchSizeResult:
    """The largest batch size whose training (or inference) step fits the GPU.

    The estimator proposes it on the CPU (about a second per estimate, typically 4-5
    estimates); with ``confirm=True`` the proposal runs on this machine's GPU (fresh model and
    optimizer, the same two steps as ``memfit validate``) and is corrected in at most
    ``max_trials`` trials. With ``confirm=False`` no GPU is touched: give ``gpu=``.

    ``model`` is a zero-argument factory (needed to confirm: each trial builds a fresh one on
    the GPU), a model name (``bert-base-uncased``, ``tv:resnet50``), or an ``nn.Module``
    (estimate only). ``make_batch(n)`` builds a batch of ``n`` samples; make it the *largest*
    batch you expect (the longest sequence, the largest image): sizes that vary with the data
    are the usual reason a found batch fails later. For a model name, ``seq_len`` does that.

    ``margin`` is memory kept free beyond the prediction: a fraction of the GPU (default 2%)
    or a size (``"512MiB"``, bytes). ``multiple_of`` restricts the answer to multiples of it.
    """
    start = time.perf_counter()
    _check_numbers(margin, max_batch=max_batch, multiple_of=multiple_of, max_trials=max_trials)
    _check_arguments(model, make_batch, max_batch, multiple_of, max_trials, confirm)
    if options.pop("batch_size", None) is not None:
        raise InvalidInputError(
            "find_batch_size searches the batch size, so a batch_size given beside it would be "
            "ignored: drop it (max_batch= bounds the search)."
        )
    target = _target_gpu(options.get("gpu"), confirm)
    # the search rescales this workload (Workload.with_batch_size), from the smallest batch
    options["gpu"], options["batch_size"] = target, multiple_of
    base = make_workload(model, batch_of=make_batch, **options)
    margin_bytes = resolve_margin(margin, target.total)
    budget = target.total - margin_bytes

    # traced at a few batch sizes, the rest replayed from a batch model (the answer traced)
    estimates = BatchEstimates(base)
    capacity = budget - target.context_for(base.mode)

    def estimate_at(batch_size: int) -> Estimate:
        return estimates.estimate(batch_size, with_least_capacity=True, capacity=capacity)

    def traced_at(batch_size: int) -> Estimate:
        return estimates.traced(batch_size, with_least_capacity=True, capacity=capacity)

    search = EstimateSearch(estimate_at, multiple_of, max_batch, traced_at)
    proposal = search.largest_fitting(budget)
    if proposal == 0:
        least = search.traced_point(multiple_of)
        raise DoesNotFitError(
            does_not_fit_message(
                target.name,
                multiple_of,
                least.need,
                least.context,
                least.peak_reserved,
                budget,
                StepSettings(
                    precision=base.precision,
                    mode=base.mode,
                    activation_checkpointing=base.activation_checkpointing,
                    optimizer=base.optimizer if isinstance(base.optimizer, str) else "custom",
                ),
            )
        )
    chosen, trials = proposal, list[Trial]()
    if confirm:
        chosen, trials = run_trials(
            search,
            proposal,
            budget,
            cuda_runner(base.with_batch_size, budget - search.point(proposal).context),
            margin=margin_bytes,
            max_trials=max_trials,
        )
    point = search.traced_point(chosen)
    return BatchSizeResult(
        batch_size=chosen,
        confirmed=any(t.fits and t.batch_size == chosen for t in trials),
        gpu=target.name,
        gpu_total=target.total,
        budget=budget,
        margin=margin_bytes,
        predicted_peak_reserved=point.peak_reserved,
        predicted_need=point.need,
        predicted_peak_allocated=point.peak_allocated,
        predicted_total=point.total,
        predicted_alloc_retries=point.alloc_retries,
        per_sample=search.per_sample(),
        limited_by="max_batch" if chosen + multiple_of > max_batch else "memory",
        estimates=sorted(search.points.values(), key=lambda p: p.batch_size),
        trials=trials,
        estimate_seconds=search.seconds,
        total_seconds=time.perf_counter() - start,
        traced=estimates.traces.traced,
        replayed=estimates.traces.derived,
        batch_model=estimates.note(),
    )


def resolve_margin(margin: float | int | str, total: int) -> int:
    """Bytes of the margin: a float in [0, 0.5) is a fraction of ``total``, else a size."""
    if isinstance(margin, float):
        if not 0 <= margin < 0.5:
            raise InvalidInputError(
                f"margin={margin} is not a fraction in [0, 0.5); give e.g. 0.02 for 2% of the "
                "GPU's memory, or a size such as '512MiB'."
            )
        return int(margin * total)
    try:
        size = parse_size(margin)
    except InvalidInputError as exc:  # say which value it was
        raise InvalidInputError(f"margin={margin!r}: {exc}") from None
    if size >= total:
        raise InvalidInputError(
            f"margin={margin!r} ({format_bytes(size)}) leaves nothing of the GPU's "
            f"{format_bytes(total)}; give a smaller margin."
        )
    return size


def _check_numbers(margin: Any, **counts: Any) -> None:
    """Types first, so that a string count fails here and not in a comparison later."""
    for name, value in counts.items():
        if type(value) is not int:
            raise InvalidInputError(
                f"{name}={value!r} is not a whole number (it is a {type(value).__name__}); "
                f"give an int, e.g. {name}=8."
            )
    if isinstance(margin, bool) or not isinstance(margin, (float, int, str)):
        raise InvalidInputError(
            f"margin={margin!r} is not accepted: give a fraction of the GPU's memory (a float "
            "in [0, 0.5), e.g. 0.02) or a size ('512MiB', or an int of bytes)."
        )


def _check_arguments(
    model: Any,
    make_batch: Any,
    max_batch: int,
    multiple_of: int,
    max_trials: int,
    confirm: bool,
) -> None:
    if multiple_of < 1 or max_batch < multiple_of:
        raise InvalidInputError(
            f"multiple_of={multiple_of} and max_batch={max_batch} allow no batch size: give "
            "multiple_of >= 1 and max_batch >= multiple_of."
        )
    if confirm and max_trials < 1:
        raise InvalidInputError(
            f"max_trials={max_trials} allows no GPU trial; give at least 1, or confirm=False."
        )
    if make_batch is None and not isinstance(model, str):
        raise InvalidInputError(
            "Give make_batch, a function of the batch size that returns a batch "
            "(make_batch=lambda n: torch.randn(n, 3, 224, 224)); only a model name has one."
        )
    if make_batch is not None and not _takes_one_argument(make_batch):
        raise InvalidInputError(
            f"make_batch={make_batch!r} must be a function of one argument, the batch size, "
            "that returns a batch (a tensor, tuple or dict): make_batch=lambda n: ..."
        )
    if confirm and isinstance(model, nn.Module):
        raise InvalidInputError(
            f"To confirm on the GPU, each trial builds a fresh model: pass a zero-argument "
            f"factory (model=lambda: {type(model).__name__}(...)) or a model name instead of "
            "the module, or confirm=False to estimate only."
        )


def _takes_one_argument(fn: Any) -> bool:
    if not callable(fn):
        return False
    try:
        inspect.signature(fn).bind(1)
    except TypeError:
        return False
    except ValueError:  # builtins without a signature: let the call decide
        return True
    return True


def _target_gpu(gpu: GPU | str | int | None, confirm: bool) -> GPU:
    if confirm and not torch.cuda.is_available():
        raise NoGPUError(
            "find_batch_size(confirm=True) runs trials on a CUDA GPU, and none is available "
            "here. Pass confirm=False with gpu='24GiB' (or a name such as 'a100-80g') to get "
            "the estimator's answer without a GPU."
        )
    if gpu is not None:
        return resolve_gpu(gpu)
    if not torch.cuda.is_available():
        raise InvalidInputError(
            "No GPU to size the batch for: give gpu= (--gpu on the command line), a name such "
            "as 'h100' or a size such as '24GiB'; this machine has no CUDA GPU to read it from."
        )
    local = local_gpu()
    free, _ = torch.cuda.mem_get_info()
    # memory other processes hold is not ours to plan with
    room = free + torch.cuda.memory_reserved() + local.context
    if room >= local.total:
        return local
    return GPU(f"{local.name} (free part)", room, local.compute_capability)
