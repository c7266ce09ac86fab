"""Run the what-if replays on the other CPU cores while this process replays the recorded one.

A replay of millions of events takes seconds to tens of seconds and cannot be split, so the
unit of work is one replay. Workers are forked (they inherit the operations, nothing is
copied) and there are one fewer than the cores, because this process works too: after its
own replay it takes the jobs no worker has started. Every process takes the next job from a
shared counter (:func:`memfit._forked.share_jobs`), so a core never sits idle while a job waits,
and no core runs two replays at once (which made the wall time swing by half, with three
processes on two cores).

Small traces are replayed here, one after the other: forking would cost more than it saves;
and so is everything where ``fork`` is not available.
"""

from __future__ import annotations

from contextlib import suppress

from memfit._forked import ForkedPool, WorkerLink, can_fork, cpu_count, share_jobs
from memfit.allocator import AllocatorConfig, ReplayOps
from memfit.snapshot._replay import ReplayRun, replay_peaks

__all__ = ["PARALLEL_MIN_EVENTS", "Job", "PeakJobs", "replay_missing"]

PARALLEL_MIN_EVENTS = 200_000
Job = tuple[AllocatorConfig, int | None, int | None]  # config, capacity, device_total


def replay_missing(ops: ReplayOps, jobs: list[Job], runs: dict[int, ReplayRun]) -> list[ReplayRun]:
    """Every job's replay, in order: from ``runs`` (by index), else replayed here (what a worker
    could not finish: it died, failed or never started)."""
    return [runs[i] if i in runs else replay_peaks(ops, *job) for i, job in enumerate(jobs)]


class PeakJobs:
    """Replays of ``jobs`` for their peaks; start them, do other work, then :meth:`results`."""

    def __init__(self, ops: ReplayOps, jobs: list[Job], *, parallel: bool = True) -> None:
        self._ops = ops
        self._jobs = jobs
        self._pool: ForkedPool | None = None
        workers = min(cpu_count() - 1, len(jobs))
        if not parallel or workers < 1 or ops.num_events < PARALLEL_MIN_EVENTS or not can_fork():
            return
        with suppress(OSError):  # cannot fork (out of memory, process limit): do it all here
            self._pool = ForkedPool(self._replay_shared, workers)

    def _replay_shared(self, link: WorkerLink) -> None:
        """In a worker: the jobs it takes, one at a time."""
        share_jobs(link, lambda i: replay_peaks(self._ops, *self._jobs[i]), len(self._jobs))

    def results(self) -> list[ReplayRun]:
        """Every job's replay, in order: this process takes the jobs no worker has started."""
        runs: dict[int, ReplayRun] = {}
        if self._pool is not None:
            try:
                while (index := self._pool.take(len(self._jobs))) is not None:
                    runs[index] = replay_peaks(self._ops, *self._jobs[index])
                for index, run in self._pool.messages():
                    if isinstance(run, ReplayRun):  # not a Failed: that job is replayed here
                        runs[index] = run
            finally:
                self.cancel()
        return replay_missing(self._ops, self._jobs, runs)

    def cancel(self) -> None:
        """Stop the workers; the results are not needed."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None
