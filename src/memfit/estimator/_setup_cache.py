"""What building the model leaves cached, and the peak of a training loop that keeps it.

An estimate replays the steps in a pool emptied after the setup (model, optimizer, the caller's
batch), as ``memfit validate`` runs them and ``memfit.apply`` leaves them: the blocks that
temporaries of the setup freed are let go (``torch.cuda.empty_cache()``). A loop of the user's
own keeps them cached, and the steps may then reserve more: Qwen2.5-0.5B's tied head is made
and dropped while the model is built, and the 520 MiB segment it leaves took a planned step's
peak 3.2% above the estimate on an H200 (to the byte when replayed with it kept;
benchmarks/results/2026-12-03-h200-host-costs).
:func:`setup_cache_note` says so where it matters.
"""

from __future__ import annotations

from memfit._units import MiB, format_bytes
from memfit.allocator import AllocatorConfig, AllocatorReplay, Recording, ReplayOps
from memfit.estimator._pressure import replay_ops
from memfit.trace import Trace

__all__ = ["kept_setup_peak", "setup_cache_note"]

_LEAST_CACHED = 2 * MiB  # less left cached by the setup cannot change where a step's blocks go
_LEAST_RISE = 0.005  # a rise of the peak under half a percent is not worth a note


def setup_cached(trace: Trace, config: AllocatorConfig) -> int:
    """The bytes the setup leaves cached in the allocator (reserved, not allocated) when the
    steps start."""
    setup = trace.events[: trace.steps_start]
    empties = tuple(i for i in trace.empty_cache_at if i < trace.steps_start)
    replay = AllocatorReplay(config)
    replay.run(ReplayOps.from_events(setup, empty_cache_before=empties))
    return replay.reserved - replay.allocated


def kept_setup_peak(trace: Trace, config: AllocatorConfig) -> int:
    """The steps' peak reserved when what the setup left cached is kept."""
    allocated: list[int] = []
    reserved: list[int] = []
    replay = AllocatorReplay(config)
    replay.run(replay_ops(trace, setup_cache_kept=True), record=Recording(allocated, reserved))
    return max(reserved[trace.steps_start :], default=replay.reserved)


def setup_cache_note(trace: Trace, config: AllocatorConfig, peak_reserved: int) -> list[str]:
    """A note when a loop that keeps what the setup left cached peaks above ``peak_reserved``
    (the estimate's): by how much, and the call that avoids it. Empty otherwise; the second
    replay runs only when the setup leaves a segment's worth cached."""
    cached = setup_cached(trace, config) if trace.steps_start > 0 else 0
    if cached < _LEAST_CACHED:
        return []
    kept = kept_setup_peak(trace, config)
    if kept <= peak_reserved * (1 + _LEAST_RISE):
        return []
    return [
        f"building the model leaves {format_bytes(cached)} cached in the allocator (blocks its "
        "temporaries freed); this estimate, like memfit validate and memfit.apply, lets them go "
        f"before the first step. A training loop that keeps them peaks at {format_bytes(kept)} "
        f"reserved (+{format_bytes(kept - peak_reserved)}): call torch.cuda.empty_cache() once "
        "after building the model and optimizer"
    ]
