"""Explain a snapshot: :func:`report` builds a :class:`SnapshotReport`.

From the trace alone (exact): live requested bytes and reserved bytes after every event,
their peaks, out-of-memory entries. From replaying the trace through the emulated allocator
with the recorded settings and addresses: torch's ``allocated`` statistic (rounded, whole
blocks), the segments and blocks at the peak, the largest free block over time, and a check
that the replay reproduces the recorded reserved memory. Then the same trace under other
settings (what-ifs) and a recommendation.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from memfit._units import format_bytes
from memfit.allocator import ScriptedAddressSpace, SegmentInfo, segment_bases_from_trace
from memfit.snapshot._collect import SEGMENT_ALLOC, SEGMENT_FREE, SEGMENT_MAP, SEGMENT_UNMAP
from memfit.snapshot._replay import ReplayRun, build_ops, run_replay
from memfit.snapshot._sites import NO_FRAMES
from memfit.snapshot._snapshot import Snapshot, read
from memfit.snapshot._stream import StreamingReplays
from memfit.snapshot._timeline import OOMEntry, TraceTimeline, trace_timeline
from memfit.snapshot._what_if_runs import WhatIfRuns, start_streaming
from memfit.snapshot._whatif import WhatIf, config_text

__all__ = ["LiveBlock", "Phase", "ReplayCheck", "SiteRow", "SnapshotReport", "report"]

SCHEMA_VERSION = 1
_SAMPLES = 400
_BEFORE = "(allocated before the trace)"
_NO_PYTHON = "(no Python frames: the autograd engine or another thread)"
_VA_TOTAL = 1 << 40  # 1 TiB: expandable segments never run out of address space in a replay
_JSON_POINTS = 500
_SEGMENT_ACTIONS = {
    SEGMENT_ALLOC: "segment_alloc",
    SEGMENT_FREE: "segment_free",
    SEGMENT_MAP: "segment_map",
    SEGMENT_UNMAP: "segment_unmap",
}


@dataclass(frozen=True, slots=True)
class LiveBlock:
    """An allocation alive at the peak. ``event`` is when it was made (None: before the trace)."""

    address: int
    size: int  # bytes requested
    stream: int
    event: int | None
    site: str | None


@dataclass(frozen=True, slots=True)
class SiteRow:
    """Bytes alive at the peak, by allocation site."""

    site: str
    size: int
    count: int


@dataclass(frozen=True, slots=True)
class Phase:
    """An annotated span of the trace (torch marks optimizer steps and zero_grad)."""

    name: str
    kind: str  # "optimizer", "zero_grad" or "other"
    start: int  # first event
    end: int  # one past the last event


@dataclass(frozen=True, slots=True)
class ReplayCheck:
    """Does the emulator, given the recorded settings, do what the real allocator did?"""

    recorded_peak_reserved: int
    emulated_peak_reserved: int
    segment_events: int  # in the trace
    segment_events_matched: int  # how many from the start the replay reproduced, in order
    exact: bool
    message: str


@dataclass(frozen=True)
class SnapshotReport:
    """Everything ``memfit snapshot`` shows. Sizes in bytes, event indices from 0."""

    source: str
    device: int
    devices_with_trace: tuple[int, ...]
    settings: str
    settings_note: str | None
    entries: int
    events: int
    actions: dict[str, int]
    complete: bool
    initial_requested: int
    initial_reserved: int
    duration_s: float | None
    peak_allocated: int
    peak_allocated_event: int
    peak_requested: int
    peak_requested_event: int
    peak_reserved: int
    peak_reserved_event: int
    fragmentation_at_peak: int  # reserved - allocated at the peak reserved
    largest_free_at_peak: int | None  # largest cached free block then (from the replay)
    fragmentation_samples: tuple[tuple[int, int, int], ...]  # (event, reserved-alloc, largest)
    top_blocks: tuple[LiveBlock, ...]
    top_sites: tuple[SiteRow, ...]
    frames_note: str | None
    segments_at_peak: tuple[SegmentInfo, ...]
    replay: ReplayCheck
    what_if: tuple[WhatIf, ...]
    recommendation: str
    ooms: tuple[OOMEntry, ...]
    phases: tuple[Phase, ...]
    notes: tuple[str, ...]
    event_time_s: npt.NDArray[np.float64] = field(repr=False)  # seconds from the first entry
    allocated: npt.NDArray[np.int64] = field(repr=False)
    requested: npt.NDArray[np.int64] = field(repr=False)
    reserved: npt.NDArray[np.int64] = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``units`` says sizes are bytes)."""
        from memfit.snapshot._json import report_dict

        return report_dict(self, _JSON_POINTS)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)


# ---------------------------------------------------------------------------------------------


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


def _address_space(snapshot: Snapshot, timeline: TraceTimeline) -> ScriptedAddressSpace | None:
    """The recorded segment addresses, for a trace that starts empty."""
    if not timeline.complete:
        return None
    rows = _segment_rows(snapshot)
    # Expandable segments of one GPU lie 1.125 x its memory apart, and each maps at most the
    # peak reserved from its base: the peak tells them apart.
    total = max(timeline.peak_reserved, 1)
    return ScriptedAddressSpace(segment_bases_from_trace(rows, device_total=total))


def _device_total(snapshot: Snapshot) -> int | None:
    """The GPU's memory for the replay with the recorded settings.

    The snapshot does not say. It matters for expandable segments only: each reserves address
    space for 1.125 x the GPU's memory, which bounds how far it can grow; a real GPU's range is
    never the limit, so the replay takes a range no trace can fill either. (Telling the
    recorded segments apart needs the opposite, a bound from below: see _address_space.)
    """
    return _VA_TOTAL if snapshot.config.expandable_segments else None


def _replay_check(snapshot: Snapshot, timeline: TraceTimeline, run: ReplayRun) -> ReplayCheck:
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


def _phases(snapshot: Snapshot, event_time: npt.NDArray[np.int64]) -> tuple[Phase, ...]:
    if not snapshot.trace.has_time or not len(event_time):
        return ()
    open_at: dict[str, int] = {}
    out = []
    for a in sorted(snapshot.annotations, key=lambda a: a.time_us):
        if a.stage == "START":
            open_at[a.name] = a.time_us
        elif a.name in open_at:
            start = int(np.searchsorted(event_time, open_at.pop(a.name), side="left"))
            end = int(np.searchsorted(event_time, a.time_us, side="right"))
            if end > start:
                name = a.name.split("#", 1)[-1]
                kind = (
                    "optimizer"
                    if "Optimizer.step" in a.name
                    else ("zero_grad" if "zero_grad" in a.name else "other")
                )
                out.append(Phase(name, kind, start, end))
    return tuple(out)


def _live(
    snapshot: Snapshot, timeline: TraceTimeline, event: int, top: int
) -> tuple[list[LiveBlock], list[SiteRow], str | None]:
    """The largest live blocks and the top sites at ``event``."""
    t = snapshot.trace
    alive = timeline.live_at(event)
    sites_of_alive = t.site[timeline.entry[alive]]
    site_names = t.sites
    blocks = [
        LiveBlock(
            int(timeline.addr[i]),
            int(timeline.size[i]),
            int(timeline.stream[i]),
            int(i),
            site_names[s] if s >= 0 else None,
        )
        for i, s in zip(alive.tolist(), sites_of_alive.tolist(), strict=True)
    ]
    blocks += [
        LiveBlock(b.address, b.size, b.stream, None, snapshot.block_sites.get(b.address))
        for b in timeline.initial_live_at(event)
    ]
    blocks.sort(key=lambda b: (-b.size, b.address))
    note = None
    sites: list[SiteRow] = []
    if not t.sites:
        note = NO_FRAMES
    else:
        totals: dict[str, list[int]] = {}
        for b in blocks:
            label = b.site or (_BEFORE if b.event is None else _NO_PYTHON)
            row = totals.setdefault(label, [0, 0])
            row[0] += b.size
            row[1] += 1
        sites = sorted(
            (SiteRow(s, v[0], v[1]) for s, v in totals.items()), key=lambda r: (-r.size, r.site)
        )[:top]
    return blocks[:top], sites, note


def _read(
    path: str | os.PathLike[str], device: int | None, capacity: int | None, what_if: bool
) -> tuple[Snapshot, StreamingReplays | None]:
    """Read a snapshot, replaying what-ifs on another core meanwhile when that pays."""
    streaming = start_streaming(path, capacity) if what_if else None
    try:
        listener = streaming.feed if streaming is not None else None
        snapshot, streamed = read(path, device=device, listener=listener)
    except BaseException:
        if streaming is not None:
            streaming.close()
        raise
    if streaming is not None and not streamed:
        streaming.close()
        streaming = None
    return snapshot, streaming


def report(
    snapshot: Snapshot | str | os.PathLike[str],
    *,
    device: int | None = None,
    capacity: int | None = None,
    top: int = 10,
    what_if: bool = True,
) -> SnapshotReport:
    """Analyse a snapshot (a :class:`Snapshot` or the path of one): peaks, fragmentation,
    what holds memory at the peak, and what other allocator settings would have reserved.

    ``device`` picks the GPU when given a path (see :func:`load`). ``capacity`` (bytes) is the
    GPU memory the process may use, for the what-ifs: they report out of memory beyond it,
    and garbage collection is tried against it (else against the recorded peak reserved).
    ``what_if=False`` skips the what-ifs. Given a path, the what-ifs start while the file is
    read, on another core.
    """
    streaming = None
    if not isinstance(snapshot, Snapshot):
        snapshot, streaming = _read(snapshot, device, capacity, what_if)
    timeline = trace_timeline(snapshot)
    if streaming is not None and not timeline.complete:  # the stream lacked the start
        streaming.close()
        streaming = None
    ops = build_ops(timeline)
    pending = (
        WhatIfRuns(snapshot, ops, capacity, timeline.peak_reserved, streaming) if what_if else None
    )
    run = run_replay(
        ops,
        snapshot.config,
        device_total=_device_total(snapshot),
        address_space=_address_space(snapshot, timeline),
        capture_event=timeline.peak_reserved_event if timeline.num_events else None,
        samples=_SAMPLES,
    )
    check = _replay_check(snapshot, timeline, run)
    notes = list(timeline.notes)
    if snapshot.config_note:
        notes.append(snapshot.config_note)
    if len(snapshot.devices_with_trace) > 1:
        notes.append(
            f"the snapshot has traces for devices {list(snapshot.devices_with_trace)}; this is "
            f"device {snapshot.device} (choose another with --device)"
        )
    n = timeline.num_events
    if len(run.allocated) == n and run.error is None:
        allocated = run.allocated
    else:
        allocated = timeline.requested
        notes.append("allocated memory is shown as requested bytes: the replay did not finish")
    peak_allocated_event = int(allocated.argmax()) if n else 0
    peak_allocated = int(allocated[peak_allocated_event]) if n else 0
    if run.error is None and run.peak_allocated > peak_allocated:
        peak_allocated = run.peak_allocated

    rows: list[WhatIf] = []
    recommendation = "What-if replays were not run."
    if pending is not None:
        if run.error is None and run.oom_event is None:
            rows, recommendation = pending.rows(run)
        else:
            pending.close()
            recommendation = "No recommendation: the recorded trace could not be replayed."

    t = snapshot.trace
    times = t.time_us[timeline.entry]
    start_us = int(t.time_us[0]) if len(t.time_us) else 0
    event_time_s = (times - start_us) / 1e6 if t.has_time else np.zeros(n)
    k = timeline.peak_reserved_event
    frag_peak = int(timeline.reserved[k] - allocated[k]) if n else 0
    largest = dict(run.samples).get(k) if run.samples else None
    samples = tuple(
        (e, int(timeline.reserved[e] - allocated[e]), free) for e, free in run.samples if e < n
    )
    blocks, sites, frames_note = (
        _live(snapshot, timeline, peak_allocated_event, top) if n else ([], [], None)
    )
    return SnapshotReport(
        source=str(snapshot.path),
        device=snapshot.device,
        devices_with_trace=snapshot.devices_with_trace,
        settings=config_text(snapshot.config),
        settings_note=snapshot.config_note,
        entries=snapshot.num_entries,
        events=n,
        actions=dict(t.counts),
        complete=timeline.complete,
        initial_requested=timeline.initial_requested,
        initial_reserved=timeline.initial_reserved,
        duration_s=(int(t.time_us[-1]) - start_us) / 1e6 if t.has_time else None,
        peak_allocated=peak_allocated,
        peak_allocated_event=peak_allocated_event,
        peak_requested=timeline.peak_requested,
        peak_requested_event=timeline.peak_requested_event,
        peak_reserved=timeline.peak_reserved,
        peak_reserved_event=timeline.peak_reserved_event,
        fragmentation_at_peak=frag_peak,
        largest_free_at_peak=largest,
        fragmentation_samples=samples,
        top_blocks=tuple(blocks),
        top_sites=tuple(sites),
        frames_note=frames_note,
        segments_at_peak=tuple(run.captured),
        replay=check,
        what_if=tuple(rows),
        recommendation=recommendation,
        ooms=timeline.ooms,
        phases=_phases(snapshot, times),
        notes=tuple(notes),
        event_time_s=np.asarray(event_time_s, dtype=np.float64),
        allocated=allocated,
        requested=timeline.requested,
        reserved=timeline.reserved,
    )
