"""``memfit.estimate``: the predicted peak memory of a training or inference step.

trace (meta tensors) -> allocator emulation -> peaks, breakdown at the peak, timeline, verdict.
Runs on the CPU in seconds and never touches a GPU.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from memfit._errors import InvalidInputError
from memfit._events import Category
from memfit._gpus import GPU, resolve_gpu
from memfit._units import MiB, format_bytes
from memfit.allocator import AllocatorConfig, AllocatorReplay, Recording
from memfit.estimator._gc import gc_frozen, gc_paused
from memfit.estimator._pressure import least_capacity, replay_ops, retries_within
from memfit.estimator._quiet import quiet_libraries
from memfit.estimator._result import Estimate, RankPeak, Timeline, WorkloadSummary
from memfit.estimator._setup_cache import setup_cache_note
from memfit.estimator._versions import installed_versions
from memfit.technique import techniques_in
from memfit.trace import Trace, trace_workload
from memfit.workload import Workload, WorkloadOptions, given_options, make_workload

if TYPE_CHECKING:
    from typing_extensions import Unpack

# NCCL's own device memory in a DDP rank, outside PyTorch's allocator: one rank (a world of one)
# on the H200, torch 2.11 (cu130), measured 488-490 MiB over three models
# (benchmarks/results/2026-12-02-h200-activation-offload)
NCCL_ONE_RANK = 490 * MiB

__all__ = ["estimate", "estimate_workload", "module_group"]

_DEFAULT_GPU = "h100"  # whose kernels are traced when no GPU is named


def estimate(model: Any, batch: Any = None, **options: Unpack[WorkloadOptions]) -> Estimate:
    """Predict the peak GPU memory of one workload, on the CPU.

    ``model`` is an ``nn.Module`` (real or meta weights), a zero-argument factory (built on the
    meta device, free), a model name (``bert-base-uncased``, ``hf:...``, ``tv:resnet50``), or a
    :class:`~memfit.workload.Workload` already made. ``batch`` is a tensor, tuple or dict (CPU or
    meta), or a zero-argument factory; for a model name give ``batch_size`` (and ``seq_len`` for
    text) instead. The settings (``precision``, ``optimizer``, ``mode``, ``gpu``...) are those
    of :class:`~memfit.workload.WorkloadOptions`.
    """
    with quiet_libraries(), gc_paused():  # a model name imports its library here
        workload = as_workload(model, batch, options)
    return estimate_workload(workload, tight_verdict=True)


def as_workload(model: Any, batch: Any, options: WorkloadOptions) -> Workload:
    """``model`` if it is a workload already (then nothing else may be given), else the workload
    :func:`~memfit.workload.make_workload` makes of the arguments."""
    if not isinstance(model, Workload):
        return make_workload(model, batch, **options)
    options = given_options(options)  # a setting given as None is not given
    if batch is not None or options:
        given = ", ".join(["batch"] * (batch is not None) + sorted(options))
        raise InvalidInputError(
            f"A Workload already holds every setting; {given} given beside it would be "
            "ignored. Use dataclasses.replace(workload, ...) or make_workload(...) instead."
        )
    return model


def _batch_from_trace(trace: Trace) -> str:
    """The shape of the first input the step allocated (the user's batch factory is not called
    outside the trace: it may create CUDA tensors, and an estimate never touches a GPU)."""
    for info in trace.infos:
        if info.category is Category.INPUT and info.shape:
            return " x ".join(str(s) for s in info.shape)
    return "custom batch"


def estimate_workload(
    workload: Workload,
    *,
    with_least_capacity: bool = False,
    capacity: int | None = None,
    tight_verdict: bool = False,
    trace: Trace | None = None,
    setup_note: bool = True,
) -> Estimate:
    """Trace and replay one workload (the work behind :func:`estimate`). With
    ``with_least_capacity``, also the least memory it runs in (``estimator._pressure``) and,
    given a ``capacity`` it runs in, how often the allocator frees its cache there. With
    ``tight_verdict``, both are found when the free-running peak does not fit the workload's
    GPU, so that the verdict can say whether the step fits by freeing the cache. ``trace``: the
    workload's trace, made already (the planner replays one trace under several allocator
    settings). ``setup_note``: the note on a loop that keeps the setup's cache, a second replay
    where the setup leaves some (searches that keep no notes leave it out)."""
    config = workload.allocator
    gpu = workload.gpu
    target = gpu or resolve_gpu(_DEFAULT_GPU)
    if trace is None:
        with quiet_libraries(), gc_frozen():
            trace = trace_workload(workload, target)
    allocated, reserved, peak_index = _replay(trace, config)
    ranks, peak_rank = _ranks(workload, target, trace, config, allocated, reserved)
    # NCCL sets itself up at the first collective: DDP broadcasts at construction; FSDP2 on
    # one rank runs none (its context measured the same as a run without NCCL on the H200)
    talks = workload.strategy == "ddp" or (
        workload.strategy is not None and workload.world_size > 1
    )
    context = target.context_for(workload.mode) + (NCCL_ONE_RANK if talks else 0)
    if (
        tight_verdict
        and gpu is not None
        and capacity is None
        and max(reserved, default=0) + context > gpu.total
    ):
        # it does not fit with memory to spare: say whether it fits by freeing the cache
        # (not worth the replays when even the allocated peak does not fit)
        capacity = gpu.total - context
        with_least_capacity = max(allocated, default=0) + context <= gpu.total
    least = retries = None
    if with_least_capacity and allocated:
        least = least_capacity(trace, config, max(allocated), max(reserved))
        if capacity is not None and capacity >= least:
            retries = retries_within(trace, config, capacity)
    by_category, by_module = _breakdown(trace, peak_index)
    info = _info_at(trace, peak_index)
    phases = [
        (p, max(0, i - trace.steps_start))
        for p, i in trace.phases
        if i >= trace.steps_start and p not in ("setup", "steps", "end")
    ]
    return Estimate(
        workload=_summary(workload, trace),
        peak_allocated=max(allocated) if allocated else 0,
        peak_reserved=max(reserved) if reserved else 0,
        non_pytorch=context,
        by_category=by_category,
        by_module=by_module,
        peak_op=info[0],
        peak_module=info[1],
        peak_phase=info[2],
        timeline=Timeline(allocated, reserved, phases),
        gpu=gpu,
        notes=[
            *workload.notes,
            *trace.notes,
            *_rank_notes(ranks, peak_rank),
            *(setup_cache_note(trace, config, max(reserved, default=0)) if setup_note else []),
        ],
        trace_seconds=trace.seconds,
        least_capacity=least,
        alloc_retries=retries,
        traced_for=target.name,
        versions=installed_versions(),
        ranks=ranks,
        peak_rank=peak_rank,
        host_memory=trace.host_memory,
        replayed_from=trace.derived_from,
    )


def _ranks(
    workload: Workload,
    gpu: GPU,
    trace: Trace,
    config: AllocatorConfig,
    allocated: list[int],
    reserved: list[int],
) -> tuple[tuple[RankPeak, ...], int]:
    """Every rank's peaks, and the rank that peaks. Rank 0 is traced. Every rank of DDP runs
    the same allocations, and so does every rank of FSDP2 when each parameter's dim 0 splits
    evenly over the ranks; where one does not, FSDP2 gives rank r the r-th chunk, so the last
    rank's are the smallest (their optimizer states too), and it is traced as well. The ranks
    between run rank 0's program on shards no larger than its own and are given its peaks."""
    if workload.strategy is None or workload.world_size == 1:
        return (), 0
    last = workload.world_size - 1
    first = (max(allocated, default=0), max(reserved, default=0))
    second = first
    if trace.uneven_shards:
        with quiet_libraries(), gc_frozen():
            other = trace_workload(workload, gpu, rank=last)
        if _sizes(other) != _sizes(trace):
            other_allocated, other_reserved, _ = _replay(other, config)
            second = (max(other_allocated, default=0), max(other_reserved, default=0))
    traced = {0, last} if trace.uneven_shards else {0}
    peaks = [
        RankPeak(r, *(second if r == last else first), traced=r in traced, like=0)
        for r in range(workload.world_size)
    ]
    return tuple(peaks), last if second > first else 0


def _rank_notes(ranks: tuple[RankPeak, ...], peak_rank: int) -> list[str]:
    """What the ranks' peaks rest on, for the estimate's notes."""
    if not ranks:
        return []
    last = ranks[-1]
    if not last.traced:
        return [
            f"every rank of {len(ranks)} runs rank 0's allocations (each parameter splits evenly "
            "over the ranks), so its peaks are every rank's (Estimate.ranks)"
        ]
    same = last.peak_allocated == ranks[0].peak_allocated
    return [
        f"ranks 0 and {last.rank} traced (the last ranks' shards may be smaller: a parameter "
        f"that does not split evenly over {len(ranks)} ranks, or ZeRO's padding): "
        + (
            "they peak the same"
            if same
            else f"rank {last.rank} peaks at {format_bytes(last.peak_allocated)} allocated, "
            f"rank 0 at {format_bytes(ranks[0].peak_allocated)}"
        )
        + f"; rank {peak_rank} peaks; the ranks between are given rank 0's peaks, their shards "
        "no larger (Estimate.ranks)"
    ]


def _sizes(trace: Trace) -> list[tuple[str, int, int]]:
    return [(e.kind, e.size, e.stream) for e in trace.events]


def _summary(workload: Workload, trace: Trace) -> WorkloadSummary:
    return WorkloadSummary(
        model=workload.name,
        parameters=trace.parameters,
        batch=workload.batch_text or _batch_from_trace(trace),
        mode=workload.mode,
        precision=workload.precision,
        optimizer=_optimizer_name(workload),
        activation_checkpointing=workload.activation_checkpointing,
        allocator_config=workload.allocator_text,
        steps=workload.steps,
        accumulation=workload.accumulation,
        offload=workload.offload,
        offload_checkpoints=workload.offload_checkpoints,
        strategy=workload.strategy,
        world_size=workload.world_size,
        offload_shards=workload.offload_shards,
        batch_held=workload.batch_held,
        techniques={
            t.option.keyword: v if isinstance(v, (bool, int, float, str)) else t.words(v)
            for t, v in techniques_in(workload.techniques)
        },
    )


def _replay(trace: Trace, config: AllocatorConfig) -> tuple[list[int], list[int], int]:
    """Allocated and reserved after each event of the steps; index of the (first) allocated
    peak among them."""
    allocated: list[int] = []
    reserved: list[int] = []
    replay = AllocatorReplay(config)
    replay.run(replay_ops(trace), record=Recording(allocated, reserved))
    start = trace.steps_start
    del allocated[:start], reserved[:start]
    if not allocated:  # no steps: the state after setup
        return [replay.allocated], [replay.reserved], start
    return allocated, reserved, start + allocated.index(max(allocated))


def _live_at(trace: Trace, index: int) -> dict[int, tuple[int, int]]:
    live: dict[int, tuple[int, int]] = {}
    for event in trace.events[: index + 1]:
        if event.kind == "alloc" and event.info is not None:
            live[event.block] = (event.size, event.info)
        else:
            live.pop(event.block, None)
    return live


def _breakdown(trace: Trace, index: int) -> tuple[dict[Category, int], list[tuple[str, int]]]:
    by_category: dict[Category, int] = defaultdict(int)
    by_module: dict[str, int] = defaultdict(int)
    for size, info_index in _live_at(trace, index).values():
        info = trace.infos[info_index]
        by_category[info.category] += size
        by_module[module_group(info.module)] += size
    modules = sorted(by_module.items(), key=lambda kv: -kv[1])
    ordered = dict(sorted(by_category.items(), key=lambda kv: -kv[1]))
    return ordered, modules


def module_group(path: str) -> str:
    """Group a module path at its repeated block (``encoder.layer.3``) or its first two parts."""
    path = path.replace(" (backward)", "")
    if not path:
        return "(outside modules)"
    parts = path.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[: i + 1])
    return ".".join(parts[:2])


def _info_at(trace: Trace, index: int) -> tuple[str, str, str]:
    for event in reversed(trace.events[: index + 1]):
        if event.kind == "alloc" and event.info is not None:
            info = trace.infos[event.info]
            return info.op, info.module or "(outside modules)", info.phase
    return "", "", ""


def _optimizer_name(workload: Workload) -> str:
    """The optimizer as a report names it: none for inference, which keeps no state."""
    if workload.mode == "infer":
        return "none"
    return workload.optimizer if isinstance(workload.optimizer, str) else "custom"
