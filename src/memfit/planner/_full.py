"""The planner's last steps: the chosen candidate estimated with its whole accumulation, the
model's identity for ``memfit.apply``, and what would make a budget that nothing fits work."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import torch

from memfit._errors import MemfitError
from memfit._units import format_bytes
from memfit.estimator import estimate_workload
from memfit.planner._model_key import model_key
from memfit.planner._plan_result import Candidate, Evaluated
from memfit.planner._search import TRACED_MICRO_BATCHES, Evaluator, shortened
from memfit.workload import Workload

__all__ = [
    "FULL_CHECK_LIMIT",
    "check_chosen",
    "margin_note",
    "model_key_of",
    "would_fit",
]

FULL_CHECK_LIMIT = 8  # longest accumulation traced in full for the chosen candidate


def check_chosen(ev: Evaluator, chosen: Evaluated) -> tuple[Evaluated, str | None]:
    """``chosen`` estimated with its whole accumulation (when it is longer than the traced two
    micro-batches and at most :data:`FULL_CHECK_LIMIT`); the larger peak is kept."""
    c = chosen.candidate
    if c.accumulation <= TRACED_MICRO_BATCHES:
        return chosen, None
    if c.accumulation > FULL_CHECK_LIMIT:
        return chosen, (
            f"the chosen {c.accumulation}-way accumulation was estimated from two micro-batches "
            "(every later one starts from the same state)"
        )
    estimate = estimate_workload(dataclasses.replace(ev.workload(c), steps=2))
    ev.traces += 1
    needed = max(chosen.needed, estimate.peak_reserved + estimate.non_pytorch)
    checked = dataclasses.replace(
        chosen,
        peak_allocated=max(chosen.peak_allocated, estimate.peak_allocated),
        peak_reserved=max(chosen.peak_reserved, estimate.peak_reserved),
        needed=needed,
        fits=needed <= ev.usable,
    )
    ev.seen[c] = checked
    return checked, None


def margin_note(ev: Evaluator, chosen: Evaluated, tie: float) -> str | None:
    """Where a candidate faster than ``chosen`` by more than ``tie`` fits the budget but not the
    margin kept free, a note naming the fastest such and the margin that would choose it (the
    trial that measures plans under the bare budget finds those: ResNet-50 at 4 GiB on an H200,
    2026-12-03, 64 x 2 without checkpointing ran 8% faster than the plan, in 4.26 of 4.29 GB)."""
    total = ev.gpu.total
    faster = [
        e
        for e in ev.seen.values()
        if not e.fits and e.needed <= total and e.step_seconds < chosen.step_seconds * (1 - tie)
    ]
    if not faster:
        return None
    best = min(faster, key=lambda e: (e.step_seconds, e.needed))
    margin = math.floor((1 - best.needed / total) * 100) / 100
    return (
        f"{best.candidate.describe()} is predicted {chosen.step_seconds / best.step_seconds:.1f}x "
        f"as fast and needs {format_bytes(best.needed)}: within the {format_bytes(total)} budget "
        f"but not the {format_bytes(ev.usable)} left by the margin; margin={margin:.2f} "
        f"(--margin {margin:.2f}) would choose it, with less room for what the estimate does "
        "not see (other processes, a library's own buffers)"
    )


def model_key_of(workload: Workload) -> str:
    """:func:`model_key` of the workload's model, built on the meta device (no memory)."""
    with torch.device("meta"):
        model = workload.build_model()
    return model_key(model)


def would_fit(
    ev: Evaluator,
    smallest: Evaluated,
    usable: int,
    remake: Callable[[int], Workload] | None = None,
) -> list[str]:
    """What would make the step fit when nothing in the search does."""
    out = []
    margin_left = ev.usable / max(ev.gpu.total, 1)
    out.append(
        f"a GPU with at least {format_bytes(int(smallest.needed / margin_left))} "
        f"(the smallest configuration, {smallest.candidate.describe()}, needs "
        f"{format_bytes(smallest.needed)})"
    )
    seq_len = ev.seq_len
    if remake is not None and seq_len and seq_len >= 2:
        shorter = seq_len // 2
        while shorter >= max(1, seq_len // 8):
            c = smallest.candidate
            short = remake(shorter).with_batch_size(c.micro_batch)
            trial = dataclasses.replace(
                shortened(ev.workload(c), min(c.accumulation, TRACED_MICRO_BATCHES)),
                make_batch=short.make_batch,
                batch_of=short.batch_of,
                seq_len=shorter,
            )
            estimate = estimate_workload(trial)
            ev.traces += 1
            needed = estimate.peak_reserved + estimate.non_pytorch
            if needed <= usable:
                out.append(
                    f"sequences of {shorter} tokens: the smallest configuration then needs "
                    f"{format_bytes(needed)}"
                )
                break
            shorter //= 2
    out.extend(_sharded(ev, smallest, usable))
    return out


SHARDED_RANKS = (2, 4, 8)  # the FSDP2 jobs tried where nothing fits one GPU


def _sharded(ev: Evaluator, smallest: Evaluated, usable: int) -> list[str]:
    """Whether FSDP2 over a few GPUs of this size would fit the smallest configuration (the
    optimizer stepping after backward, nothing offloaded: what FSDP2 is estimated with), and
    failing that, FSDP2 with its shards on the host (its CPU offload policy). A plan already
    for FSDP2 on N GPUs: 2N or 4N GPUs, and its CPU offload on the N, each where it fits."""
    c = smallest.candidate
    base = ev.base
    family = c.optimizer.partition("-")[0]
    plain = dataclasses.replace(
        c,
        optimizer=f"{family}-fused" if family in ("adam", "adamw") else family,
        offload=0.0,
        offload_checkpoints=False,
        allocator_config="",
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
    that rank needs (the last one tried where none fits: ``None`` and its need). Raises
    ``MemfitError`` where the model cannot be sharded as memfit wraps it."""
    needed = 0
    for ranks in choices:
        needed = _rank_needs(ev, plain, ranks, offload=False)[0]
        if needed <= usable:
            return ranks, needed
    return None, needed


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
    ev.traces += 1
    return estimate.peak_reserved + estimate.non_pytorch, estimate.host_memory
