"""``memfit.plan``: the fastest training configuration that fits a memory budget, found on the
CPU by estimating candidates.

The search: for each precision and activation checkpointing, the largest micro-batch (a divisor
of the global batch, gradients accumulated over the rest) that fits, found by bisection since
memory grows with the micro-batch; each with the fastest optimizer variant (fused) and with and
without expandable segments. Then partial checkpointing where none and full bracket the budget,
the optimizer's variants (``memfit.technique.OptimizerVariant``) where what they save could make
a step fit, and the fastest few with the other optimizers and the next smaller micro-batch;
the user's own configuration is evaluated as the baseline.
The fastest candidate that fits is chosen; its accumulation, when longer than the traced two
micro-batches, is estimated in full before it is returned.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from memfit._errors import InvalidInputError
from memfit._gpus import GPU
from memfit._units import format_bytes
from memfit.estimator import gc_paused, installed_versions, quiet_libraries
from memfit.planner._candidates import (
    CHOICE_TIE,
    EXPANDABLE,
    SPEED_TIE,
    Progress,
    evaluate_group,
    fastest,
    fits,
    replay_notes,
    traced,
    with_allocators,
)
from memfit.planner._offload_search import (
    offload_space,
    search_checkpoint_offload,
    search_offload,
)
from memfit.planner._parallel import default_workers, run_jobs
from memfit.planner._partial_search import search_partial
from memfit.planner._plan_checks import (
    baseline_candidate,
    check_plannable,
    check_workers,
    plan_budget,
)
from memfit.planner._plan_result import Candidate, Evaluated, Plan
from memfit.planner._search import Evaluator
from memfit.planner._space import compiled_plan_note, search_space
from memfit.planner._step_time import HOST_BOUND_NOTE, calibration_for
from memfit.planner._technique_search import (
    added_note,
    allowed_techniques,
    kept_techniques,
    search_techniques,
)
from memfit.planner._variant_search import accumulates, search_variants
from memfit.technique.compilation import budget_in_effect
from memfit.workload import Workload, WorkloadOptions, given_options, make_workload

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["DEFAULT_MARGIN", "EXPANDABLE", "PlanOptions", "plan"]

DEFAULT_MARGIN = 0.05  # of the budget kept free: the allocator's drift over a long run


def plan(
    model: Any,
    batch: Any = None,
    *,
    budget: str | GPU | None = None,
    global_batch: int | None = None,
    **options: Unpack[PlanOptions],
) -> Plan:
    """The fastest configuration of a training step that fits the GPU, chosen on the CPU.

    ``model``, ``batch`` and ``options`` are :func:`memfit.estimate`'s (the user's own
    configuration, the baseline). Its ``gpu`` option is the GPU memory to fit in, a GPU name
    (``"h100"``) or a size (``"24GiB"``); ``budget`` takes the same (give one of them). Both
    together plan the kind of GPU ``gpu`` names (its speed ranks the candidates) in ``budget``
    of its memory, e.g. ``gpu="a100-40g", budget="20GiB"``, as :func:`memfit.fit` does
    (:func:`~memfit.planner.plan_target`). ``global_batch`` is the samples per optimizer step
    (default: the batch size given), kept by gradient accumulation. ``precisions``,
    ``checkpointing`` and ``optimizers`` narrow the search (defaults: bf16-mixed, fp32 and the
    workload's own precision; none, selective and full; the optimizer's fused, foreach and
    for-loop variants, and those ``memfit.technique``'s optimizer variants offer for it,
    ``OptimizerVariant.offered``). A model compiled as a whole with ``torch.compile`` is
    searched over torch.compile's activation memory budget instead of checkpointing
    (``memory_budgets``, default :data:`COMPILED_BUDGETS`), at its own precision unless
    ``precisions`` says otherwise. ``offloads``: the shares of the blocks not
    checkpointed whose saved tensors are offloaded to pinned host memory, tried with fewer
    blocks checkpointed than the fastest plan without (default ``(1.0,)``; ``()``: no offload).
    ``margin`` is the share of the budget kept free. ``cache_freeing``: a faster configuration
    that needs more than the budget running free may be chosen where the allocator, freeing its
    cache when the GPU is full, runs it within the budget and frees the cache in its first steps
    only (``planner._settle``); False keeps to configurations that fit with their cache kept.
    ``batch_of(n)`` makes a batch of ``n`` samples (for a model object: the planner tries
    several micro-batch sizes). ``workers``: processes tracing at once (default: the cores, at
    most 4). ``progress`` is called as ``progress(done, total, what)`` as the search goes.
    ``calibration``: a file of step-time rates (``memfit calibrate --out FILE``); by default
    this machine's calibration of the budget's GPU type when ``memfit calibrate`` saved one,
    else memfit's own. ``allow``: techniques that change what is trained which the plan may add,
    by their keywords (LoRA's adapters of rank 16 on PEFT's default targets, the base frozen;
    beside them, the base weights quantized to nf4, QLoRA); without it a plan keeps what is
    trained as the user gave it.
    """
    started = time.perf_counter()
    margin = options.pop("margin", DEFAULT_MARGIN)
    precisions, checkpointing = options.pop("precisions", None), options.pop("checkpointing", None)
    optimizers, offloads = options.pop("optimizers", None), options.pop("offloads", None)
    memory_budgets = options.pop("memory_budgets", None)
    progress, workers = options.pop("progress", None), options.pop("workers", None)
    batch_of, cache_freeing = options.pop("batch_of", None), options.pop("cache_freeing", True)
    calibration = options.pop("calibration", None)
    allow = allowed_techniques(options.pop("allow", None))
    target, usable = plan_budget(budget, options.pop("gpu", None), margin)
    check_workers(workers)
    if calibration is not None and not isinstance(calibration, (str, os.PathLike)):
        raise InvalidInputError(
            f"calibration={calibration!r} is not a file: give the path `memfit calibrate "
            "--out FILE` wrote, or leave it out to use this machine's or memfit's."
        )
    if not isinstance(cache_freeing, bool):
        raise InvalidInputError(
            f"cache_freeing={cache_freeing!r} is not True or False: give False to keep to "
            "configurations that fit with the allocator's cache kept, or leave it out."
        )
    with quiet_libraries(), gc_paused():  # model libraries' chatter; no GC over the traces
        request = SearchRequest(
            model=model,
            batch=batch,
            gpu=target,
            usable=usable,
            margin=margin,
            global_batch=global_batch,
            axes=SearchAxes(precisions, checkpointing, optimizers, memory_budgets, offloads, allow),
            progress=progress,
            workers=workers,
            batch_of=batch_of,
            cache_freeing=cache_freeing,
            calibration_file=None if calibration is None else os.fspath(calibration),
            options=options,
        )
        result, ev, note, source = _search(request)
    return dataclasses.replace(
        result,
        notes=[n for n in [note] if n] + result.notes,
        calibration=source,
        seconds=time.perf_counter() - started,
        traces=ev.traces,
        versions={k: v for k, v in installed_versions().to_dict().items() if v},
    )


class PlanOptions(WorkloadOptions, total=False):
    """:func:`plan`'s keywords: the workload's (:class:`~memfit.workload.WorkloadOptions`, the
    user's own configuration) and the search's own, each described in :func:`plan`."""

    margin: float
    precisions: tuple[str, ...] | list[str] | None
    checkpointing: tuple[bool | str, ...] | list[bool | str] | None
    optimizers: tuple[str, ...] | list[str] | None
    memory_budgets: tuple[float, ...] | list[float] | None
    offloads: tuple[float, ...] | list[float] | None
    progress: Progress | None
    workers: int | None
    batch_of: Callable[[int], Any] | None
    cache_freeing: bool
    calibration: str | os.PathLike[str] | None
    allow: tuple[str, ...] | list[str] | None


@dataclasses.dataclass(frozen=True)
class SearchAxes:
    """What the user narrowed the search to (None: the defaults, :func:`search_space`)."""

    precisions: Any = None
    checkpointing: Any = None
    optimizers: Any = None
    memory_budgets: Any = None
    offloads: Any = None
    allow: tuple[str, ...] = ()  # techniques that change what is trained the plan may add


@dataclasses.dataclass(frozen=True)
class SearchRequest:
    """One search of :func:`plan`'s, its arguments checked: the model and batch with the
    user's options, the GPU and the bytes usable on it, the axes, how it runs."""

    model: Any
    batch: Any
    gpu: GPU
    usable: int
    margin: float
    global_batch: int | None
    axes: SearchAxes
    progress: Progress | None
    workers: int | None
    batch_of: Callable[[int], Any] | None
    cache_freeing: bool
    calibration_file: str | None
    options: WorkloadOptions


def _search(request: SearchRequest) -> tuple[Plan, Evaluator, str | None, str]:
    """The search behind :func:`plan`: the plan, the evaluator (its traces) and the
    calibration's note and source."""
    model, batch, gpu, global_batch = (
        request.model,
        request.batch,
        request.gpu,
        request.global_batch,
    )
    progress, batch_of, options = request.progress, request.batch_of, request.options
    # the step memfit.apply returns is given the whole batch, which the caller holds meanwhile
    given: WorkloadOptions = {"batch_held": True, **given_options(options), "gpu": gpu}
    if global_batch is not None and batch is None and given.get("batch_size") is None:
        # a model name and the global batch alone: the step you would run is the whole batch
        given["batch_size"] = global_batch
    base = make_workload(model, batch, batch_of=batch_of, **given)
    check_plannable(base)
    total = global_batch if global_batch is not None else base.batch_size
    if total is None:
        raise InvalidInputError(
            "plan needs the global batch: give global_batch=N (samples per optimizer step) or "
            "batch_size=N."
        )
    calibration, calibration_note = calibration_for(gpu, request.calibration_file)
    user = baseline_candidate(base, total)
    axes = request.axes
    space = search_space(
        base, gpu, axes.precisions, axes.checkpointing, axes.optimizers, axes.memory_budgets
    )
    space["offload"] = offload_space(axes.offloads, space, base)
    if space["compiled"][0] and user.memory_budget is None:  # the budget its compile would use
        user = dataclasses.replace(user, memory_budget=budget_in_effect())
    workers = default_workers() if request.workers is None else request.workers
    usable = request.usable
    ev = Evaluator(base, gpu, usable, calibration, user, base.seq_len, workers=workers)
    ev.parameters = (space["trained"][0], space["trainable"][0])
    ev.kept = kept_techniques(base.techniques)
    levels = [n for n in range(total, 0, -1) if total % n == 0]
    _search_precisions(ev, space, levels, total, user, workers, progress)
    search_partial(ev, space, levels, total, workers, progress)
    search_variants(ev, space, total, workers, progress)
    search_offload(ev, space, progress)
    search_checkpoint_offload(ev, space, levels, total, progress)
    allow_notes = search_techniques(ev, workers, progress, axes.allow)
    groups = _refinements(ev, levels, total, space["optimizers"])

    def refined(done: int, of: int) -> None:
        if progress is not None:
            progress(done, of, "optimizer variants and smaller micro-batches")

    run_jobs(ev, evaluate_group, groups, workers, refined)
    baseline = traced(ev, user)  # evaluated in the first phase
    remake: Callable[[int], Workload] | None = None
    if batch is None and base.seq_len:  # a model name: the same step on shorter sequences

        def remake(seq_len: int) -> Workload:
            shorter: WorkloadOptions = {**given, "seq_len": seq_len}
            return make_workload(model, None, **shorter)

    result = _assemble(ev, base, request, total, baseline, remake)
    result.notes.extend(allow_notes + added_note(ev, result.chosen))
    if space["compiled"][0]:
        result.notes.append(compiled_plan_note(space))
    if base.batch_held:
        result.notes.append(
            "each candidate's memory counts the whole batch the step is given, which your loop "
            "holds on the GPU while the step runs (the step memfit.apply returns splits it into "
            "the micro-batches); batch_held=False (--no-batch-held) leaves it out"
        )
    if base.strategy is not None:  # the memory is a rank's; the time has no collectives
        held = "gradient buckets" if base.strategy == "ddp" else "shards and all-gathers"
        result.notes.append(
            f"planned one rank of {base.strategy.upper()} on {base.world_size}: each "
            f"candidate's memory is a rank's (its {held} and NCCL's memory included); the step "
            "times leave out the collectives, and memfit.apply does not wrap the model in "
            f"{base.strategy.upper()} (wrap it yourself, after apply"
            + (
                "; the step apply returns then splits each batch before it runs, every rank "
                "alike, rather than after an out-of-memory error)"
                if base.strategy == "fsdp2"
                else ")"
            )
        )
    return result, ev, calibration_note, calibration.source


def _search_precisions(
    ev: Evaluator,
    space: dict[str, tuple[Any, ...]],
    levels: list[int],
    total: int,
    user: Candidate,
    workers: int,
    progress: Progress | None,
) -> None:
    """The bisections of every precision and checkpointing, and the user's configuration.
    Precisions whose matrix products run at under half the fastest rate (fp32 beside bf16)
    come second, and only if their floor could come within the tie of the fastest found: a
    step's FLOPs at the precision's best rate (:func:`_step_floor`). A 7B model's fp32 steps
    are ten times its bf16 ones on an H200; BERT's are host-bound and still searched."""
    first = space["optimizers"][0]
    rates = {p: _peak_rate(ev, p) for p in space["precisions"]}
    fast = max(rates.values())
    early = [p for p in space["precisions"] if rates[p] >= fast / 2]
    late = [p for p in space["precisions"] if p not in early]
    done = 0

    def searched(n: int, of: int) -> None:
        if progress is not None:
            progress(done + n, done + of, "precision and checkpointing searched")

    def job(e: Evaluator, item: tuple[str, bool | str | float, float | None] | None) -> None:
        if item is None:
            e.evaluate(with_allocators(user))
        else:
            _bisect(e, levels, total, item[0], item[1], first, item[2])

    def items_of(precisions: list[str]) -> list[Any]:
        return [
            (p, c, b) for p in precisions for c in space["checkpointing"] for b in space["budgets"]
        ]

    items = items_of(early)
    run_jobs(ev, job, [*items, None], workers, searched)
    done = len(items) + 1
    floor, best = _step_floor(ev), fastest(ev)
    late = [p for p in late if floor / rates[p] <= best * (1 + SPEED_TIE)]
    if late:
        run_jobs(ev, job, items_of(late), workers, searched)


def _peak_rate(ev: Evaluator, precision: str) -> float:
    """The fastest FLOP/s the calibration measured for matrix products at ``precision``
    (infinite where it has no curve: nothing is skipped on a guess)."""
    dtype = "fp32" if precision == "fp32" else precision.removesuffix("-mixed")
    points = ev.calibration.curves.get(f"mm:{dtype}", ())
    return max((w / t for w, t in points if t > 0), default=float("inf"))


def _step_floor(ev: Evaluator) -> float:
    """The fewest FLOPs of one optimizer step among the traces so far (no checkpointing's,
    where traced): divided by a rate, a floor under any precision's step time."""
    return float(min((e.step_flops for e in ev.seen.values() if e.step_flops), default=0))


def _bisect(
    ev: Evaluator,
    levels: list[int],
    total: int,
    precision: str,
    ckpt: bool | str | float,
    opt: str,
    budget: float | None = None,
) -> None:
    """Evaluate the largest micro-batch of ``levels`` that fits (and what bisection passed);
    ``budget``: a compiled model's activation memory budget."""

    def at(i: int) -> Candidate:
        return Candidate(
            levels[i], total // levels[i], precision, ckpt, opt, "", budget, techniques=ev.kept
        )

    lo, hi = 0, len(levels) - 1  # levels descend: find the first index that fits
    if fits(ev, at(lo)):
        return
    while hi - lo > 1:  # the smallest is taken to fit until bisection reaches it
        mid = (lo + hi) // 2
        if fits(ev, at(mid)):
            hi = mid
        else:
            lo = mid
    if hi == len(levels) - 1:
        fits(ev, at(hi))


def _refinements(
    ev: Evaluator, levels: list[int], total: int, optimizers: tuple[str, ...]
) -> list[list[Candidate]]:
    """For the fastest few that fit: the other optimizer variants and the next smaller
    micro-batch (the step-time model may order them otherwise than memory suggests)."""
    fitting = sorted((e for e in ev.seen.values() if e.fits), key=lambda e: e.step_seconds)
    tops: list[Candidate] = []
    for e in fitting:
        c = dataclasses.replace(e.candidate, allocator_config="")
        if c not in tops:
            tops.append(c)
        if len(tops) == 3:
            break
    groups: list[list[Candidate]] = []
    for c in tops:
        variants = [dataclasses.replace(c, optimizer=opt) for opt in optimizers[1:]]
        i = levels.index(c.micro_batch)
        if i + 1 < len(levels):
            smaller = levels[i + 1]
            variants.append(
                dataclasses.replace(
                    c,
                    micro_batch=smaller,
                    accumulation=total // smaller,
                    optimizer=c.optimizer if accumulates(c.optimizer) else optimizers[0],
                )
            )
        for v in variants:
            group = with_allocators(v)
            if group[0] not in ev.seen and group not in groups:
                groups.append(group)
    return groups


def _assemble(
    ev: Evaluator,
    base: Workload,
    request: SearchRequest,
    total: int,
    baseline: Evaluated,
    remake: Callable[[int], Workload] | None,
) -> Plan:
    """The plan from the evaluated candidates: the fastest that fits (checked, settled where
    the allocator frees its cache), or the smallest and what would make it fit."""
    from memfit.planner._full import check_chosen, margin_note, model_key_of
    from memfit.planner._settle import settled_choice
    from memfit.planner._would_fit import would_fit

    notes: list[str] = []
    ranked = _traced_first(ev, notes)
    if ranked and ranked[0].fits:
        checked, note = check_chosen(ev, ranked[0])
        notes += [note] if note else []
        if not checked.fits:  # its full accumulation took more: the next one that fits
            ranked = _ranked(ev)
    chosen = ranked[0] if ranked and ranked[0].fits else None
    usable = request.usable
    freeing = request.cache_freeing
    settled, note = settled_choice(ev, chosen, SPEED_TIE) if freeing else (None, None)
    while settled is not None and settled.replayed_from:  # what it settled on is traced first
        traced(ev, settled.candidate)
        settled, note = settled_choice(ev, chosen, SPEED_TIE)
    notes += [note] if note else []
    if settled is not None:
        ranked = _ranked(ev)
        chosen = ranked[0]
    if chosen is not None and chosen.bound == "host":
        notes.append(HOST_BOUND_NOTE)
    if chosen is not None and (note := margin_note(ev, chosen, SPEED_TIE)):
        notes.append(note)
    smallest = ranked[0] if ranked and chosen is None else None  # least memory comes first
    notes += replay_notes(ev)
    shortfall = smallest.needed - usable if smallest is not None else 0
    hints = would_fit(ev, smallest, usable, remake) if smallest is not None else []
    if smallest is not None:
        notes.append(
            f"nothing fits {format_bytes(usable)}: the smallest configuration, "
            f"{smallest.candidate.describe()}, needs {format_bytes(smallest.needed)}"
        )
    return Plan(
        model=base.name,
        model_key=model_key_of(base),
        budget=request.gpu.total,
        usable=usable,
        margin=request.margin,
        global_batch=total,
        seq_len=base.seq_len,
        chosen=chosen,
        candidates=ranked,
        baseline=baseline,
        smallest=smallest,
        shortfall=shortfall,
        would_fit=hints,
        notes=notes,
    )


def _traced_first(ev: Evaluator, notes: list[str]) -> list[Evaluated]:
    """:func:`_ranked`, with the first (the choice, or the smallest where nothing fits) traced
    where it was replayed from a batch model's derived trace; where that changes its numbers
    (never seen: the model is exact where it answers), a note says so and the ranking is made
    again."""
    ranked = _ranked(ev)
    while ranked and ranked[0].replayed_from:
        replayed = ranked[0]
        again = traced(ev, replayed.candidate)
        if (again.peak_reserved, again.step_seconds) != (
            replayed.peak_reserved,
            replayed.step_seconds,
        ):
            notes.append(
                f"{replayed.candidate.describe()} was replayed from the traces at micro-batches "
                f"{', '.join(map(str, replayed.replayed_from))}, and its own trace differs "
                f"({format_bytes(replayed.peak_reserved)} reserved and "
                f"{replayed.step_seconds * 1e3:.1f} ms replayed, "
                f"{format_bytes(again.peak_reserved)} and {again.step_seconds * 1e3:.1f} ms "
                "traced): the trace's numbers are used"
            )
        ranked = _ranked(ev)
    return ranked


def _speed(e: Evaluated) -> tuple[float, int, int]:
    """Fastest first; on a tie, the fewest changes to the user's configuration, then the least
    memory (an allocator setting changes no step time)."""
    return (e.step_seconds, len(e.changes), e.needed)


def _ranked(ev: Evaluator) -> list[Evaluated]:
    """Those that fit, the chosen first (:func:`_choice`), then by speed; then those that do
    not, the smallest first."""
    everything = list(ev.seen.values())
    fitting = sorted((e for e in everything if e.fits), key=_speed)
    if fitting:
        chosen = _choice(fitting, ev.usable)
        fitting.remove(chosen)
        fitting.insert(0, chosen)
    return fitting + sorted((e for e in everything if not e.fits), key=lambda e: e.needed)


def _choice(fitting: list[Evaluated], usable: int) -> Evaluated:
    """Of the candidates predicted within :data:`CHOICE_TIE` of the fastest, the one with the
    fewest changes, then the least memory (by steps of 1% of ``usable``: closer is no
    headroom worth a slower step), then the fastest: closer than the tie, the order of two
    steps is the step-time model's error and the GPU's run-to-run noise; memory left free is
    not."""
    best = fitting[0].step_seconds
    tied = [e for e in fitting if e.step_seconds <= best * (1 + CHOICE_TIE)]
    step = max(1, usable // 100)
    return min(tied, key=lambda e: (len(e.changes), e.footprint // step, e.step_seconds))
