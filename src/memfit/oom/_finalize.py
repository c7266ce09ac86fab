"""Turn the facts the observer saved into the report: analysis, ranked fixes, Markdown, JSON.

The Markdown comes from the renderer the caller passes (:data:`OOMRenderer`): oom computes the
:class:`OOMDiagnosis`, :mod:`memfit.report` renders it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import memfit.snapshot as snapshot_api
from memfit._errors import MemfitError
from memfit.oom._diagnosis import OOMDiagnosis, OOMRenderer
from memfit.oom._fixes import rank_fixes
from memfit.oom._incident import Incident, read_incident
from memfit.oom._observer import write_json

__all__ = ["ReportFiles", "finalize_reports", "write_report"]


@dataclass(frozen=True, slots=True)
class ReportFiles:
    """The files of one out-of-memory report."""

    report: Path  # Markdown
    json: Path  # the facts, the analysis and the fixes
    snapshot: Path | None  # torch's snapshot at the failure (a pickle)

    def to_dict(self) -> dict[str, str | None]:
        """The files' paths, for ``--json``."""
        return {
            "report": str(self.report),
            "json": str(self.json),
            "snapshot": None if self.snapshot is None else str(self.snapshot),
        }


def _analyse(
    incident: Incident, what_if: bool
) -> tuple[snapshot_api.SnapshotReport | None, str | None]:
    path = incident.snapshot_path
    if path is None or not incident.history_recorded:
        return None, None
    try:
        snap = snapshot_api.load(path, device=incident.device_index)
        if snap.num_entries == 0:
            return None, None
        return snapshot_api.report(snap, what_if=what_if), None
    except MemfitError as exc:
        return None, f"The snapshot could not be analysed: {exc}"


def write_report(
    path: str | os.PathLike[str], *, render: OOMRenderer, what_if: bool = True
) -> ReportFiles:
    """Write the report of the facts file ``path`` (``oom-....json``): ``oom-....md`` beside it,
    and the JSON completed with the analysis and the fixes (``"status": "complete"``).
    ``render`` writes the Markdown (``memfit.report.oom_markdown``).

    Replays the recorded trace under other allocator settings unless ``what_if=False``. A
    report already complete is left as it is.
    """
    incident = read_incident(path)
    md = incident.path.with_name(incident.stem + ".md")
    files = ReportFiles(md, incident.path, incident.snapshot_path)
    if incident.raw.get("status") == "complete" and md.exists():
        return files
    analysis, note = _analyse(incident, what_if)
    fixes, notes = rank_fixes(incident, analysis)
    diagnosis = OOMDiagnosis(incident, tuple(fixes), tuple(notes), analysis, note)
    text = render(diagnosis)
    tmp = md.with_name(f"{md.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, md)
    data = dict(incident.raw)
    data["status"] = "complete"
    data["units"] = "bytes"
    data["files"] = dict(data.get("files") or {}, report=md.name)
    data.update(diagnosis.to_dict())
    write_json(str(incident.path), data)
    return files


def finalize_reports(
    directory: str | os.PathLike[str], *, render: OOMRenderer, names: set[str] | None = None
) -> list[ReportFiles]:
    """Write the reports still pending in ``directory`` (only files in ``names``, if given).

    A facts file that cannot be read (the process was killed while writing it) is skipped.
    """
    out = []
    for path in sorted(Path(directory).glob("oom-*.json")):
        if names is not None and path.name not in names:
            continue
        try:
            out.append(write_report(path, render=render))
        except MemfitError:
            continue
    return out
