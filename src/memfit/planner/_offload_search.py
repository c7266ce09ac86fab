"""The planner's activation offload search: fewer blocks recomputed, the rest offloaded.

Offloading a block's saved tensors costs their copies to pinned host memory and back (about
55 GB/s each way on an H200), where the copies outlast the compute they run under; recomputing
it costs a second forward of the block. Offload alone is slower than checkpointing wherever the
GPU computes a block faster than its activations cross PCIe (GPT-2 in bf16: 263 ms a step
offloaded against 76 checkpointed), but beside checkpointed blocks, whose recompute it runs
under, it is nearly free: BERT-base in fp32 checkpointing half its blocks and offloading the
other half stepped in 342 ms, against 351 checkpointing all of them (H200). So the search
starts from the fastest plan found without offload and, at its micro-batch, checkpoints fewer
of its blocks (half, then a quarter of them while that is faster) with the rest offloaded.
Each candidate is a trace; the step-time model's copy lane decides (``_step_time``).

Below full checkpointing's memory, the inputs each checkpointed block keeps for its recompute
can wait in pinned host memory too (``offload_checkpoints``, DeepSpeed's ``cpu_checkpointing``):
one tensor a block, copied under the block's forward and brought back a block ahead of its
recompute. :func:`search_checkpoint_offload` tries it at micro-batches above the largest that
full checkpointing fits (or the smallest, where nothing fits at all).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from memfit._errors import InvalidInputError
from memfit.planner._candidates import SPEED_TIE, Progress, fastest, fits, with_allocators
from memfit.planner._parallel import run_jobs
from memfit.planner._plan_result import Candidate, Evaluated
from memfit.planner._search import Evaluator
from memfit.planner._variant_search import variants_of
from memfit.workload import Workload

__all__ = ["DEFAULT_OFFLOADS", "offload_space", "search_checkpoint_offload", "search_offload"]

DEFAULT_OFFLOADS = (1.0,)  # the blocks not checkpointed: all of them offloaded


def offload_space(
    offloads: Any, space: dict[str, tuple[Any, ...]], base: Workload
) -> tuple[float, ...]:
    """The offload shares to try: ``offloads`` checked, or the default; none for a compiled
    model (inductor plans what its graph saves) or one without repeated blocks."""
    if offloads is not None and not isinstance(offloads, (tuple, list)):
        raise InvalidInputError(
            f"offloads={offloads!r} is not a list: give the shares of the blocks to offload as "
            "a tuple of numbers between 0 and 1, e.g. offloads=(1.0,), or offloads=() for none."
        )
    shares = tuple(offloads) if offloads is not None else DEFAULT_OFFLOADS
    for share in shares:
        dataclasses.replace(base, offload=share, activation_checkpointing=False)  # checked
    if space["compiled"][0] or space["blocks"][0] < 2:
        if offloads:
            raise InvalidInputError(
                f"offloads={tuple(offloads)!r} would be ignored: "
                + (
                    "the model is compiled with torch.compile, whose graph decides what it saves"
                    if space["compiled"][0]
                    else "the model has no repeated blocks to offload"
                )
                + ". Drop offloads."
            )
        return ()
    return tuple(s for s in shares if s > 0)


def search_offload(
    ev: Evaluator, space: dict[str, tuple[Any, ...]], progress: Progress | None
) -> None:
    """From the fastest candidate that fits (and the fastest of each other precision that
    ties with it), at its micro-batch: half its checkpointed blocks,
    then a quarter while that is faster, the rest offloaded (each share of ``space``). Not
    searched where nothing fits (offload holds more than full checkpointing), nor without a
    calibration of the copies."""
    shares = space.get("offload", ())
    if not shares or not ev.calibration.pinned:
        return
    blocks: int = space["blocks"][0]
    fitting = [e for e in ev.seen.values() if e.fits and e.candidate.memory_budget is None]
    if not fitting:  # offload keeps two blocks' tensors in flight: never less than checkpointing
        return
    # the fastest of each precision that ties with the fastest: which of two such starts
    # offloads faster is the copies' to say (Qwen2.5-0.5B at 12 GiB: fp32 ahead by 1% without
    # offload, bf16-mixed's half-size activations offloaded 5% faster)
    fastest = min(e.step_seconds for e in fitting)
    starts: dict[str, Evaluated] = {}
    for e in sorted(fitting, key=lambda e: e.step_seconds):
        if e.step_seconds <= fastest * (1 + SPEED_TIE):
            starts.setdefault(e.candidate.precision, e)
    chains = [e for e in starts.values() if _checkpointed(e.candidate.checkpointing, blocks)]
    if not chains:
        return
    if progress is not None:
        progress(0, len(chains), "activation offload searched")
    for done, start in enumerate(chains, 1):
        for share in shares:
            kept = _checkpointed(start.candidate.checkpointing, blocks)
            best = start.step_seconds  # each start's chain goes on while it gets faster
            while kept > 0:
                kept //= 2
                c = dataclasses.replace(
                    start.candidate,
                    checkpointing=round(kept / blocks, 4) if kept else False,
                    offload=share,
                )
                took = _faster(ev, c, best)
                if took is None:
                    break
                best = took
        if progress is not None:
            progress(done, len(chains), "activation offload searched")


def search_checkpoint_offload(
    ev: Evaluator,
    space: dict[str, tuple[Any, ...]],
    levels: list[int],
    total: int,
    progress: Progress | None,
) -> None:
    """Full checkpointing with the blocks' inputs offloaded, for each precision searched: at
    the micro-batches above the largest that full checkpointing alone fits, upward while each
    fits and is faster than the fastest found (where nothing fits, from the smallest); at the
    whole global batch, with an optimizer variant that cannot accumulate (``search_variants``)
    too where that did not fit. Not searched without
    offload in the space, full checkpointing among the settings, or a calibration of the
    copies."""
    if not space.get("offload") or True not in space["checkpointing"] or not ev.calibration.pinned:
        return
    full = [
        e
        for e in ev.seen.values()
        if e.candidate.checkpointing is True
        and not e.candidate.offload_checkpoints
        and e.candidate.memory_budget is None
    ]
    precisions = list(dict.fromkeys(e.candidate.precision for e in full))

    def searched(done: int, of: int) -> None:
        if progress is not None:
            progress(done, of, "checkpointed inputs offloaded")

    if precisions:
        searched(0, len(precisions))
    # each precision's climb is a job of its own, against the fastest found before any of
    # them: forked workers climb them side by side and find what one process does
    before = fastest(ev)

    def climb(e: Evaluator, precision: str) -> None:
        mine = [x for x in full if x.candidate.precision == precision]
        _climb_offloaded(e, space, mine, levels, total, before)

    run_jobs(ev, climb, precisions, ev.workers, searched)


def _climb_offloaded(
    ev: Evaluator,
    space: dict[str, tuple[Any, ...]],
    mine: list[Evaluated],
    levels: list[int],
    total: int,
    best: float,
) -> None:
    """One precision's full checkpointing with the blocks' inputs offloaded, from the
    micro-batch above the largest that full checkpointing alone fits, upward while each fits
    and is faster than ``best`` and the climb's own (:func:`search_checkpoint_offload`)."""
    largest = max((e.candidate.micro_batch for e in mine if e.fits), default=0)
    above = sorted(n for n in levels if n > largest)
    tried = [e for e in mine if above and e.candidate.micro_batch == above[0]]
    if not tried:
        return
    # the one that needed least there (its optimizer a variant, say)
    template = min(tried, key=lambda e: e.needed).candidate
    for micro in above:
        c = dataclasses.replace(
            template,
            micro_batch=micro,
            accumulation=total // micro,
            allocator_config="",
            offload_checkpoints=True,
        )
        took = _faster(ev, c, best)
        if took is not None:
            best = took
            continue
        if micro == total:  # the whole batch: a variant that cannot accumulate may save more
            name = _whole_batch_variant(ev, space, c)
            if name is not None and name != c.optimizer:
                _faster(ev, dataclasses.replace(c, optimizer=name), best)
        break


def _whole_batch_variant(
    ev: Evaluator, space: dict[str, tuple[Any, ...]], c: Candidate
) -> str | None:
    """The first of the space's optimizer variants that cannot accumulate (searched at the
    whole global batch: ``search_variants``) and saves something of ``c``'s step."""
    for variant, name in variants_of(space):
        if not variant.accumulates and variant.saving(name, space["trained"][0], ev.workload(c)):
            return name
    return None


def _faster(ev: Evaluator, c: Candidate, than: float | None = None) -> float | None:
    """``c``'s step seconds if it fits and is faster than ``than`` (default: the fastest
    found before it), else None."""
    if than is None:
        than = min((e.step_seconds for e in ev.seen.values() if e.fits), default=float("inf"))
    if not fits(ev, c):
        return None
    found: list[Evaluated] = ev.evaluate(with_allocators(c))
    took = min(e.step_seconds for e in found)
    return took if took < than * (1 - SPEED_TIE / 5) else None


def _checkpointed(value: bool | str | float, blocks: int) -> int:
    """How many blocks ``activation_checkpointing=value`` recomputes (selective: none whole)."""
    if value is True:
        return blocks
    if isinstance(value, float):
        return round(value * blocks)
    return 0
