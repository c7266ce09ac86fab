"""What would make a step fit when nothing the plan searched does: a larger GPU, shorter
sequences, FSDP2 over a few GPUs of this size (or its CPU offload policy).

Each hint but the first is a trace of the smallest configuration changed one way. Those that
cannot fit are never traced: whatever the sequence length or the number of ranks, a step holds
its parameters and, for Adam's family, two states of each trained one (:func:`state_floor`; an
FSDP2 rank a share of them). The rest run in forked workers side by side, and the first that
fits, in the order the hints are tried, is the one named.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import TypeVar

from memfit._errors import MemfitError
from memfit._forked import Failed
from memfit._units import format_bytes
from memfit.estimator import estimate_workload
from memfit.planner._candidates import param_bytes
from memfit.planner._parallel import run_traces, workers_can_trace
from memfit.planner._plan_result import Candidate, Evaluated
from memfit.planner._search import TRACED_MICRO_BATCHES, Evaluator, shortened
from memfit.technique import optimizer_variant_of
from memfit.workload import Workload

__all__ = ["SHARDED_RANKS", "state_floor", "would_fit"]

SHARDED_RANKS = (2, 4, 8)  # the FSDP2 jobs tried where nothing fits one GPU
R = TypeVar("R")


def state_floor(c: Candidate, parameters: tuple[int, int]) -> int:
    """The least a step of ``c``'s precision and optimizer holds whatever its sequences and
    micro-batch: ``parameters`` (all, trained) at the precision's bytes, and two states of each
    trained one for Adam's family (each of the bytes its variant keeps it in:
    ``OptimizerVariant.state_bytes``). Gradients, buffers, activations and the allocator's
    rounding come on top."""
    total, trained = parameters
    size = param_bytes(c.precision)
    states = 0
    if c.optimizer.partition("-")[0] in ("adam", "adamw"):
        variant = optimizer_variant_of(c.optimizer)
        per = size if variant is None else variant.state_bytes(c.optimizer, size)
        states = 2 * per * trained
    return total * size + states


def would_fit(
    ev: Evaluator,
    smallest: Evaluated,
    usable: int,
    remake: Callable[[int], Workload] | None = None,
) -> list[str]:
    """What would make the step fit when nothing in the search does."""
    margin_left = ev.usable / max(ev.gpu.total, 1)
    out = [
        f"a GPU with at least {format_bytes(int(smallest.needed / margin_left))} "
        f"(the smallest configuration, {smallest.candidate.describe()}, needs "
        f"{format_bytes(smallest.needed)})"
    ]
    if state_floor(smallest.candidate, ev.parameters) <= usable:  # else no length can fit
        out += _shorter_sequences(ev, smallest, usable, remake)
    out.extend(_sharded(ev, smallest, usable))
    return out


def _shorter_sequences(
    ev: Evaluator,
    smallest: Evaluated,
    usable: int,
    remake: Callable[[int], Workload] | None,
) -> list[str]:
    """The longest of a half, a quarter and an eighth of the sequence at which the smallest
    configuration fits (a model name only: memfit makes its batches)."""
    seq_len = ev.seq_len
    if remake is None or not seq_len or seq_len < 2:
        return []
    lengths = []
    shorter = seq_len // 2
    while shorter >= max(1, seq_len // 8):
        lengths.append(shorter)
        shorter //= 2
    c = smallest.candidate

    def needs(length: int) -> Callable[[], int]:
        def trace() -> int:
            short = remake(length).with_batch_size(c.micro_batch)
            trial = dataclasses.replace(
                shortened(ev.workload(c), min(c.accumulation, TRACED_MICRO_BATCHES)),
                make_batch=short.make_batch,
                batch_of=short.batch_of,
                seq_len=length,
            )
            estimate = estimate_workload(trial)
            return estimate.peak_reserved + estimate.non_pytorch

        return trace

    found, results = first_found(ev, [needs(n) for n in lengths], lambda n: n <= usable)
    if found is None:
        return []
    return [
        f"sequences of {lengths[found]} tokens: the smallest configuration then needs "
        f"{format_bytes(results[found])}"
    ]


def _sharded(ev: Evaluator, smallest: Evaluated, usable: int) -> list[str]:
    """Whether FSDP2 over a few GPUs of this size would fit the smallest configuration (the
    optimizer stepping after backward, nothing offloaded, none of ``memfit.technique``'s
    techniques: what FSDP2 is estimated with), and
    failing that, FSDP2 with its shards on the host (its CPU offload policy). A plan already
    for FSDP2 on N GPUs: 2N or 4N GPUs, and its CPU offload on the N, each where it fits."""
    c = smallest.candidate
    base = ev.base
    if ev.kept:  # what a rank of the user's own techniques takes is not estimated here
        return []
    family = c.optimizer.partition("-")[0]
    plain = dataclasses.replace(
        c,
        optimizer=f"{family}-fused" if family in ("adam", "adamw") else family,
        offload=0.0,
        offload_checkpoints=False,
        allocator_config="",
        techniques=(),
    )
    if base.strategy == "fsdp2" and not base.offload_shards and base.mode == "train":
        found = [
            line
            for line in (
                _more_ranks(ev, plain, usable, base.world_size),
                _offloaded(ev, plain, usable, base.world_size),
            )
            if line
        ]
        return found or [
            f"FSDP2 on up to {4 * base.world_size} GPUs of this size does not fit it either, "
            f"nor with its CPU offload policy on {base.world_size}; more GPUs (world_size=N)"
        ]
    if base.strategy is not None or base.mode != "train" or c.precision == "fp16-mixed":
        return [
            "more GPUs, each holding a share of the parameters, gradients and optimizer state: "
            "plan with strategy='fsdp2' (or 'zero3') and world_size=N"
        ]
    try:
        ranks, needed = _first_fitting(ev, plain, usable, SHARDED_RANKS)
    except MemfitError as exc:  # a model FSDP2 cannot shard as memfit wraps it
        return [f"more GPUs with FSDP2: not estimated here ({str(exc).split('. ')[0]})"]
    if ranks is not None:
        return [
            f"FSDP2 on {ranks} GPUs of this size: each rank then needs "
            f"{format_bytes(needed)} ({plain.describe()}; plan it with "
            f"strategy='fsdp2', world_size={ranks}, or --strategy fsdp2 --gpus {ranks})"
        ]
    offloaded = _offloaded(ev, plain, usable, SHARDED_RANKS[-1])
    return [
        offloaded
        or (
            f"FSDP2 on up to {SHARDED_RANKS[-1]} GPUs of this size does not fit it either "
            f"({format_bytes(needed)} a rank on {SHARDED_RANKS[-1]}), nor with its CPU offload "
            "policy"
        )
    ]


def _first_fitting(
    ev: Evaluator, plain: Candidate, usable: int, choices: tuple[int, ...]
) -> tuple[int | None, int]:
    """The first world size of ``choices`` at which an FSDP2 rank of ``plain`` fits, and what
    that rank needs (the last one tried where none fits: ``None`` and its need). A world size
    whose share of :func:`state_floor` alone is over ``usable`` is not traced (the last one
    always is). Raises ``MemfitError`` where the model cannot be sharded as memfit wraps it."""
    floor = state_floor(plain, ev.parameters)
    tried = [r for r in choices[:-1] if floor // r <= usable] + [choices[-1]]
    trials = [functools.partial(_rank_gpu_needs, ev, plain, r) for r in tried]
    found, results = first_found(ev, trials, lambda needed: needed <= usable)
    if found is None:
        return None, results[-1]
    return tried[found], results[found]


def _more_ranks(ev: Evaluator, plain: Candidate, usable: int, world_size: int) -> str | None:
    """FSDP2 over twice or four times the ranks planned for, where one fits; else None."""
    try:
        ranks, needed = _first_fitting(ev, plain, usable, (2 * world_size, 4 * world_size))
    except MemfitError:  # a world size the model cannot be sharded over
        return None
    if ranks is None:
        return None
    return (
        f"FSDP2 on {ranks} GPUs of this size instead of {world_size}: each rank then needs "
        f"{format_bytes(needed)} ({plain.describe()}; plan it with world_size={ranks}, or "
        f"--gpus {ranks})"
    )


def _offloaded(ev: Evaluator, plain: Candidate, usable: int, ranks: int) -> str | None:
    """FSDP2 on ``ranks`` GPUs with the shards on the host, where it fits; else None."""
    try:
        needed, host = _rank_needs(ev, plain, ranks, offload=True)
    except MemfitError:
        return None
    ev.traces += 1
    if needed > usable:
        return None
    return (
        f"FSDP2 on {ranks} GPUs of this size with its CPU offload policy: each rank then needs "
        f"{format_bytes(needed)} of the GPU ({plain.describe()}) and {format_bytes(host)} of "
        "host memory for its shards and optimizer states, the optimizer stepped there (its "
        "time memfit does not predict); estimate it with strategy='fsdp2', "
        f"world_size={ranks}, offload_shards=True (--strategy fsdp2 --gpus {ranks} "
        "--offload-shards)"
    )


def _rank_gpu_needs(ev: Evaluator, plain: Candidate, ranks: int) -> int:
    """What one FSDP2 rank of ``plain`` needs of the GPU, its shards kept there."""
    return _rank_needs(ev, plain, ranks, offload=False)[0]


def _rank_needs(ev: Evaluator, plain: Candidate, ranks: int, *, offload: bool) -> tuple[int, int]:
    """What one FSDP2 rank of ``plain`` needs of the GPU (peak reserved and the memory outside
    PyTorch) and of the host (its offloaded shards and optimizer states)."""
    trial = dataclasses.replace(
        shortened(ev.workload(plain), min(plain.accumulation, TRACED_MICRO_BATCHES)),
        strategy="fsdp2",
        world_size=ranks,
        offload_shards=offload,
    )
    estimate = estimate_workload(trial)
    return estimate.peak_reserved + estimate.non_pytorch, estimate.host_memory


def first_found(
    ev: Evaluator, trials: Sequence[Callable[[], R]], found: Callable[[R], bool]
) -> tuple[int | None, list[R]]:
    """The index of the first of ``trials`` (traces, in the order they are tried) whose result
    is ``found``, and the results up to it (all of them where none is). With workers and a
    process that can fork, the trials run side by side; else one after the other, stopping at
    the first found. A trial's ``MemfitError`` is raised where no earlier trial is found."""
    if ev.workers <= 1 or len(trials) <= 1 or not workers_can_trace():
        results: list[R] = []
        for i, trial in enumerate(trials):
            results.append(trial())
            ev.traces += 1
            if found(results[-1]):
                return i, results
        return None, results
    answers: dict[int, R | Failed] = {}
    lost = run_traces(lambda i: trials[i](), len(trials), ev.workers, answers.__setitem__)
    for i in lost:  # a worker that died: its trial runs here
        answers[i] = trials[i]()
    ev.traces += len(trials)
    ordered: list[R] = []
    for i in range(len(trials)):
        answer = answers[i]
        if isinstance(answer, Failed):
            raise answer.error
        ordered.append(answer)
        if found(answer):
            return i, ordered
    return None, ordered
