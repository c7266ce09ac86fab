"""Read and explain a recorded PyTorch memory snapshot: ``memfit snapshot FILE``.

>>> import memfit.snapshot
>>> snap = memfit.snapshot.load("snapshot.pickle")          # doctest: +SKIP
>>> rep = memfit.snapshot.report(snap, capacity=80 * 2**30)  # doctest: +SKIP
>>> rep.peak_reserved, rep.replay.message, rep.recommendation  # doctest: +SKIP

:func:`load` reads a file saved by ``torch.cuda.memory._dump_snapshot`` (plain or gzipped)
without running anything from it: a pickle that names any Python object is refused. It keeps
the trace as arrays, so a snapshot of millions of entries loads in bounded memory.

:func:`report` computes, from the trace, the allocated and reserved memory after every event
and their peaks; replays the trace through memfit's emulation of the caching allocator with
the recorded settings (checking that it reproduces the recorded reserved memory) to get
torch's ``allocated`` statistic, the segments at the peak and the largest free block; lists
what is alive at the peak and where it was allocated (when stacks were recorded); and replays
it under other allocator settings, recommending one only if it saves more than 2% and
256 MiB of peak reserved memory. :meth:`SnapshotReport.to_json` gives the machine form;
:mod:`memfit.report` renders it (``render_snapshot`` in the terminal, ``snapshot_html`` and
``write_snapshot_html`` as a self-contained page).
"""

from __future__ import annotations

from memfit.advice import WhatIf
from memfit.snapshot._live import LiveBlock, SiteRow
from memfit.snapshot._recorded import ReplayCheck
from memfit.snapshot._report import Phase, SnapshotReport, report
from memfit.snapshot._snapshot import Annotation, Snapshot, load

__all__ = [
    "Annotation",
    "LiveBlock",
    "Phase",
    "ReplayCheck",
    "SiteRow",
    "Snapshot",
    "SnapshotReport",
    "WhatIf",
    "load",
    "report",
]
