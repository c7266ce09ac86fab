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

from memfit._display import html_repr
from memfit.advice import WhatIf, alloc_conf_text
from memfit.allocator import SegmentInfo
from memfit.snapshot._live import LiveBlock, SiteRow, live_at_peak
from memfit.snapshot._recorded import ReplayCheck, address_space, device_total, replay_check
from memfit.snapshot._replay import build_ops, run_replay
from memfit.snapshot._snapshot import Snapshot, read
from memfit.snapshot._stream import StreamingReplays
from memfit.snapshot._timeline import OOMEntry, trace_timeline
from memfit.snapshot._what_if_runs import WhatIfRuns, start_streaming

__all__ = ["Phase", "SnapshotReport", "report"]

_SAMPLES = 400
_JSON_POINTS = 500


@dataclass(frozen=True, slots=True)
class Phase:
    """An annotated span of the trace (torch marks optimizer steps and zero_grad)."""

    name: str
    kind: str  # "optimizer", "zero_grad" or "other"
    start: int  # first event
    end: int  # one past the last event


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

    def __repr__(self) -> str:
        """One line: the file, its size and the peaks (the series and rows stay out)."""
        gib = 2**30
        return (
            f"SnapshotReport({self.source!r}, device {self.device}, {self.events} events, "
            f"peak allocated {self.peak_allocated} B ({self.peak_allocated / gib:.2f} GiB), "
            f"peak reserved {self.peak_reserved} B ({self.peak_reserved / gib:.2f} GiB), "
            f"{len(self.what_if)} what-ifs, {len(self.ooms)} OOMs)"
        )

    def _repr_html_(self) -> str | None:
        """The report as HTML where a notebook shows it (``memfit.report`` renders it, as
        ``memfit snapshot --html`` does: the peaks, the timeline and segment charts, the
        what-ifs, what is alive at the peak)."""
        return html_repr("snapshot", self)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``units`` says sizes are bytes)."""
        from memfit.snapshot._json import report_dict

        return report_dict(self, _JSON_POINTS)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)


# ---------------------------------------------------------------------------------------------


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
        device_total=device_total(snapshot),
        address_space=address_space(snapshot, timeline),
        capture_event=timeline.peak_reserved_event if timeline.num_events else None,
        samples=_SAMPLES,
    )
    check = replay_check(snapshot, timeline, run)
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
        live_at_peak(snapshot, timeline, peak_allocated_event, top) if n else ([], [], None)
    )
    return SnapshotReport(
        source=str(snapshot.path),
        device=snapshot.device,
        devices_with_trace=snapshot.devices_with_trace,
        settings=alloc_conf_text(snapshot.config),
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
