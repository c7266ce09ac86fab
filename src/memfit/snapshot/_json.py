"""A :class:`SnapshotReport` as plain JSON data (``memfit snapshot --json``).

Sizes are bytes (``"units": "bytes"``), events are indices into the trace's allocations and
frees, from 0. The timeline is downsampled keeping each bucket's maximum, so its peaks are the
report's peaks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, cast

from memfit._series import downsample

if TYPE_CHECKING:
    from memfit.snapshot._report import SnapshotReport

__all__ = ["report_dict"]


def _seq(values: object) -> Sequence[int]:
    """A numpy array where the chart code takes a sequence (it converts with numpy anyway)."""
    return cast("Sequence[int]", values)


SCHEMA = "memfit.snapshot/1"


def _segments(report: SnapshotReport) -> list[dict[str, Any]]:
    return [
        {
            "address": s.address,
            "total_size": s.total_size,
            "allocated_size": s.allocated_size,
            "stream": s.stream,
            "pool": s.pool,
            "is_expandable": s.is_expandable,
            "blocks": [
                {"address": b.address, "size": b.size, "allocated": b.allocated} for b in s.blocks
            ],
        }
        for s in report.segments_at_peak
    ]


def report_dict(report: SnapshotReport, max_points: int) -> dict[str, Any]:
    """The JSON document for ``report``."""
    series = downsample(_seq(report.allocated), _seq(report.reserved), max(max_points, 3))
    return {
        "schema": SCHEMA,
        "units": "bytes",
        "source": report.source,
        "device": report.device,
        "devices_with_trace": list(report.devices_with_trace),
        "allocator_settings": report.settings,
        "allocator_settings_note": report.settings_note,
        "trace": {
            "entries": report.entries,
            "events": report.events,
            "actions": report.actions,
            "starts_empty": report.complete,
            "allocated_before_start": report.initial_requested,
            "reserved_before_start": report.initial_reserved,
            "duration_seconds": report.duration_s,
        },
        "peaks": {
            "allocated": {"bytes": report.peak_allocated, "event": report.peak_allocated_event},
            "requested": {"bytes": report.peak_requested, "event": report.peak_requested_event},
            "reserved": {"bytes": report.peak_reserved, "event": report.peak_reserved_event},
        },
        "fragmentation": {
            "at_peak_reserved": {
                "reserved_minus_allocated": report.fragmentation_at_peak,
                "largest_free_block": report.largest_free_at_peak,
            },
            "samples": [
                {"event": e, "reserved_minus_allocated": f, "largest_free_block": lf}
                for e, f, lf in report.fragmentation_samples
            ],
        },
        "top_blocks": [asdict(b) for b in report.top_blocks],
        "top_sites": [asdict(s) for s in report.top_sites],
        "frames_note": report.frames_note,
        "segments_at_peak_reserved": _segments(report),
        "replay_check": asdict(report.replay),
        "what_if": [asdict(w) for w in report.what_if],
        "recommendation": report.recommendation,
        "ooms": [asdict(o) for o in report.ooms],
        "phases": [asdict(p) for p in report.phases],
        "notes": list(report.notes),
        "timeline": {
            "event": [int(v) for v in series.x],
            "allocated": [int(v) for v in series.allocated],
            "reserved": [int(v) for v in series.reserved],
        },
    }
