"""Run the what-if replays of a report, using the CPU cores that are free.

Three places a what-if can run, cheapest first:

* while the file is read, in the worker :func:`start_streaming` forks (the settings that do
  not depend on the recorded ones or on the peak: see ``_stream``);
* in forked workers (:class:`~memfit.snapshot._parallel.PeakJobs`) while this process replays
  the recorded settings, when nothing was streamed;
* in this process, after the recorded replay.

:class:`WhatIfRuns` hands out the jobs and puts the results back in the order of
``memfit.planner.allocator_candidates`` (which settings to try, and which to recommend, is
advice: :mod:`memfit.planner`), with the rows and the recommendation.
"""

from __future__ import annotations

import os
from pathlib import Path

from memfit._forked import can_fork, cpu_count
from memfit.advice import (
    WhatIf,
    alloc_conf_text,
    allocator_candidates,
    recommend_allocator,
    streamable_configs,
)
from memfit.allocator import ReplayOps as Ops
from memfit.snapshot._parallel import Job, PeakJobs, replay_missing
from memfit.snapshot._replay import ReplayRun, replay_peaks
from memfit.snapshot._snapshot import Snapshot
from memfit.snapshot._stream import STREAM_MIN_BYTES, StreamingReplays

__all__ = ["WhatIfRuns", "start_streaming"]


def start_streaming(path: str | os.PathLike[str], capacity: int | None) -> StreamingReplays | None:
    """A streaming worker for reading ``path``, if the file is large and a core is free."""
    try:
        size = Path(path).expanduser().stat().st_size
    except OSError:
        return None
    if size < STREAM_MIN_BYTES or cpu_count() < 2 or not can_fork():
        return None
    return StreamingReplays([(config, capacity, capacity) for config in streamable_configs()])


class WhatIfRuns:
    """The what-if replays for one snapshot: started at once, collected by :meth:`rows`."""

    def __init__(
        self,
        snapshot: Snapshot,
        ops: Ops,
        capacity: int | None,
        peak_reserved: int,
        streaming: StreamingReplays | None,
    ) -> None:
        self._snapshot = snapshot
        self._ops = ops
        # garbage collection acts only under a memory fraction: the allowed memory is the
        # given capacity, or else just what the run reserved at its peak
        gc_total = capacity if capacity is not None else -(-peak_reserved * 1000 // 999)
        self._cands = allocator_candidates(snapshot.config)
        self._notes = [cand.note(capacity is not None) for cand in self._cands]
        self._jobs: list[Job] = [
            (cand.config, capacity, gc_total if cand.with_capacity else capacity)
            for cand in self._cands
        ]
        self._streaming = streaming
        streamed = streaming.jobs if streaming is not None else []
        self._rest = [i for i, job in enumerate(self._jobs) if job not in streamed]
        rest = [self._jobs[i] for i in self._rest]
        if streaming is not None:
            # its worker shares the rest with this process: no third process on two cores
            streaming.finish(rest)
            self._pending = PeakJobs(ops, [], parallel=False)
        else:
            self._pending = PeakJobs(ops, rest)

    def _runs(self) -> list[ReplayRun]:
        runs: dict[int, ReplayRun] = dict(zip(self._rest, self._pending.results(), strict=False))
        streaming = self._streaming
        if streaming is not None:
            mine = {}
            while (k := streaming.take()) is not None:
                mine[k] = replay_peaks(self._ops, *self._jobs[self._rest[k]])
            streamed, theirs = streaming.results()
            for k, run in {**theirs, **mine}.items():
                runs[self._rest[k]] = run
            for job, run in zip(streaming.jobs, streamed or [], strict=False):
                if job in self._jobs:  # not when it is the recorded setting
                    runs[self._jobs.index(job)] = run
        return replay_missing(self._ops, self._jobs, runs)

    def rows(self, recorded: ReplayRun) -> tuple[list[WhatIf], str]:
        """Wait for every replay; the table rows (the recorded settings first) and the advice."""
        runs = self._runs()
        baseline = recorded.peak_reserved
        rows = [
            WhatIf(
                label=alloc_conf_text(self._snapshot.config),
                recorded=True,
                peak_reserved=baseline,
                peak_allocated=recorded.peak_allocated,
                saved=0,
                outcome=None,
                note="as recorded",
            )
        ]
        for cand, note, run in zip(self._cands, self._notes, runs, strict=True):
            if run.error is not None:
                rows.append(WhatIf(cand.label, False, None, None, None, run.error, note))
            elif run.oom_event is not None:
                outcome = f"out of memory at event {run.oom_event:,}"
                rows.append(WhatIf(cand.label, False, None, None, None, outcome, note))
            else:
                saved = baseline - run.peak_reserved
                rows.append(
                    WhatIf(
                        cand.label, False, run.peak_reserved, run.peak_allocated, saved, None, note
                    )
                )
        return rows, recommend_allocator(rows, baseline)

    def close(self) -> None:
        """Drop the replays (the recorded trace could not be replayed)."""
        self._pending.cancel()
        if self._streaming is not None:
            self._streaming.close()
