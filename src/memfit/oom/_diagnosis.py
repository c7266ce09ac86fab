"""What an out-of-memory report says, as data: the facts, the trace's analysis, the fixes.

:class:`OOMDiagnosis` is what :func:`memfit.oom.write_report` computes from a facts file and
hands to a renderer for the readable ``.md`` (``memfit.report.oom_markdown``); its
:meth:`~OOMDiagnosis.to_dict` completes the ``.json``. oom sits below :mod:`memfit.report` in
the layers, so it never renders: whoever installs the report passes an :data:`OOMRenderer`
(``memfit.oom_report``, ``memfit run`` and the trainer callbacks pass memfit.report's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memfit.advice import Fix
from memfit.oom._incident import Incident
from memfit.snapshot import SnapshotReport

__all__ = ["OOMDiagnosis", "OOMRenderer", "analysis_dict"]


@dataclass(frozen=True, slots=True)
class OOMDiagnosis:
    """One out-of-memory error explained: the facts saved at the failure, the analysis of the
    recorded trace (``None`` without one, ``analysis_note`` saying why when it failed), and
    the fixes ranked by expected saving with the notes of the ranking."""

    incident: Incident
    fixes: tuple[Fix, ...]
    notes: tuple[str, ...]
    analysis: SnapshotReport | None = None
    analysis_note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """What the report adds to the facts file's JSON (sizes in bytes)."""
        return {
            "analysis": analysis_dict(self.analysis) if self.analysis is not None else None,
            "analysis_note": self.analysis_note,
            "fixes": [f.to_dict() for f in self.fixes],
            "notes": list(self.notes),
        }


OOMRenderer = Callable[[OOMDiagnosis], str]
"""Turns a diagnosis into the text of the report's ``.md`` file."""


def analysis_dict(analysis: SnapshotReport) -> dict[str, Any]:
    """The parts of a snapshot analysis the OOM report's JSON keeps (sizes in bytes)."""
    return {
        "source": analysis.source,
        "events": analysis.events,
        "complete": analysis.complete,
        "settings": analysis.settings,
        "peak_allocated": analysis.peak_allocated,
        "peak_reserved": analysis.peak_reserved,
        "peak_reserved_event": analysis.peak_reserved_event,
        "fragmentation_at_peak": analysis.fragmentation_at_peak,
        "largest_free_at_peak": analysis.largest_free_at_peak,
        "top_sites": [
            {"site": r.site, "size": r.size, "count": r.count} for r in analysis.top_sites
        ],
        "what_if": [
            {
                "setting": r.label,
                "recorded": r.recorded,
                "peak_reserved": r.peak_reserved,
                "saved": r.saved,
                "outcome": r.outcome,
                "note": r.note,
            }
            for r in analysis.what_if
        ],
        "recommendation": analysis.recommendation,
        "replay": analysis.replay.message,
        "notes": list(analysis.notes),
    }
