"""The replay with the recorded settings, and the check that it does what torch did.

Given the recorded settings and the recorded segment addresses, the emulator should take
every segment where torch did; :func:`replay_check` compares the peak reserved memory and the
segment events, in order, and says how close it came.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memfit._units import format_bytes
from memfit.allocator import ScriptedAddressSpace, segment_bases_from_trace
from memfit.snapshot._collect import SEGMENT_ALLOC, SEGMENT_FREE, SEGMENT_MAP, SEGMENT_UNMAP
from memfit.snapshot._replay import ReplayRun
from memfit.snapshot._snapshot import Snapshot
from memfit.snapshot._timeline import TraceTimeline

__all__ = ["ReplayCheck", "address_space", "device_total", "replay_check"]

_VA_TOTAL = 1 << 40  # 1 TiB: expandable segments never run out of address space in a replay
_SEGMENT_ACTIONS = {
    SEGMENT_ALLOC: "segment_alloc",
    SEGMENT_FREE: "segment_free",
    SEGMENT_MAP: "segment_map",
    SEGMENT_UNMAP: "segment_unmap",
}


@dataclass(frozen=True, slots=True)
class ReplayCheck:
    """Does the emulator, given the recorded settings, do what the real allocator did?"""

    recorded_peak_reserved: int
    emulated_peak_reserved: int
    segment_events: int  # in the trace
    segment_events_matched: int  # how many from the start the replay reproduced, in order
    exact: bool
    message: str


def _segment_rows(snapshot: Snapshot) -> list[tuple[str, int, int]]:
    """The trace's segment entries as (action, address, size)."""
    t = snapshot.trace
    index = np.flatnonzero(np.isin(t.action, list(_SEGMENT_ACTIONS)))
    return [
        (_SEGMENT_ACTIONS[code], addr, size)
        for code, addr, size in zip(
            t.action[index].tolist(), t.addr[index].tolist(), t.size[index].tolist(), strict=True
        )
    ]


def address_space(snapshot: Snapshot, timeline: TraceTimeline) -> ScriptedAddressSpace | None:
    """The recorded segment addresses, for a trace that starts empty."""
    if not timeline.complete:
        return None
    rows = _segment_rows(snapshot)
    # Expandable segments of one GPU lie 1.125 x its memory apart, and each maps at most the
    # peak reserved from its base: the peak tells them apart.
    total = max(timeline.peak_reserved, 1)
    return ScriptedAddressSpace(segment_bases_from_trace(rows, device_total=total))


def device_total(snapshot: Snapshot) -> int | None:
    """The GPU's memory for the replay with the recorded settings.

    The snapshot does not say. It matters for expandable segments only: each reserves address
    space for 1.125 x the GPU's memory, which bounds how far it can grow; a real GPU's range is
    never the limit, so the replay takes a range no trace can fill either. (Telling the
    recorded segments apart needs the opposite, a bound from below: see _address_space.)
    """
    return _VA_TOTAL if snapshot.config.expandable_segments else None


def replay_check(snapshot: Snapshot, timeline: TraceTimeline, run: ReplayRun) -> ReplayCheck:
    recorded = _segment_rows(snapshot)
    mine = [(e.action, e.address, e.size) for e in run.segment_events]
    matched = next(
        (i for i, (x, y) in enumerate(zip(recorded, mine, strict=False)) if x != y),
        min(len(recorded), len(mine)),
    )
    real, emulated = timeline.peak_reserved, run.peak_reserved
    same_events = matched == len(recorded) == len(mine)
    if run.error is not None:
        message = f"the emulator could not replay the trace: {run.error}"
    elif real == emulated:
        message = "emulator reproduces the recorded peak reserved exactly"
        if same_events:
            message += f" (and all {len(recorded):,} segment events)"
        elif timeline.complete:
            message += f" (segment events: {matched:,} of {len(recorded):,} match in order)"
    else:
        diff = emulated - real
        share = f", {100 * abs(diff) / real:.1f}%" if real else ""
        message = (
            f"emulated peak reserved {format_bytes(emulated)} differs from the recorded "
            f"{format_bytes(real)} by {'+' if diff > 0 else '-'}{format_bytes(abs(diff))}"
            f"{share}"
        )
        if timeline.complete:
            message += f"; segment events: {matched:,} of {len(recorded):,} match in order"
    if not timeline.complete:
        message += " (the trace does not start empty, so the replay starts from a guess)"
    return ReplayCheck(
        recorded_peak_reserved=real,
        emulated_peak_reserved=emulated,
        segment_events=len(recorded),
        segment_events_matched=matched,
        exact=run.error is None and real == emulated and same_events,
        message=message,
    )
