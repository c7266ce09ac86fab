"""Run the what-if replays on the other CPU cores while this process replays the recorded one.

A replay of millions of events takes seconds to tens of seconds and cannot be split, so the
unit of work is one replay. Workers are forked (they inherit the operations, nothing is
copied) and there are one fewer than the cores, because this process works too: after its
own replay it takes the jobs no worker has started. Every process pulls the next job from a
shared counter, so a core never sits idle while a job waits, and no core runs two replays at
once (which made the wall time swing by half, with three processes on two cores).

Small traces are replayed here, one after the other: forking would cost more than it saves.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
from multiprocessing.process import BaseProcess
from typing import Any

from memfit.allocator import AllocatorConfig, ReplayOps
from memfit.snapshot._replay import ReplayRun, replay_peaks

__all__ = ["PARALLEL_MIN_EVENTS", "Job", "PeakJobs", "cpu_count", "take"]

PARALLEL_MIN_EVENTS = 200_000
Job = tuple[AllocatorConfig, int | None, int | None]  # config, capacity, device_total

# what forked workers inherit: the operations, the jobs, the counter, the results queue
_SHARED: dict[str, Any] = {}


def cpu_count() -> int:
    """The cores this process may run on."""
    return _cpus()


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def take(counter: Any, count: int) -> int | None:
    """The next job index from a shared counter, or None when all ``count`` are taken."""
    with counter.get_lock():
        index = int(counter.value)
        if index >= count:
            return None
        counter.value = index + 1
        return index


def _work() -> None:
    ops, jobs, counter, results = (_SHARED[k] for k in ("ops", "jobs", "counter", "results"))
    while (index := take(counter, len(jobs))) is not None:
        results.put((index, replay_peaks(ops, *jobs[index])))


class PeakJobs:
    """Replays of ``jobs`` for their peaks; start them, do other work, then :meth:`results`."""

    def __init__(self, ops: ReplayOps, jobs: list[Job], *, parallel: bool = True) -> None:
        self._ops = ops
        self._jobs = jobs
        self._workers: list[BaseProcess] = []
        self._counter: Any = None
        self._results: Any = None
        workers = min(_cpus() - 1, len(jobs))
        if (
            not parallel
            or workers < 1
            or ops.num_events < PARALLEL_MIN_EVENTS
            or "fork" not in multiprocessing.get_all_start_methods()
        ):
            return
        ctx = multiprocessing.get_context("fork")
        self._counter = ctx.Value("i", 0)
        self._results = ctx.Queue()
        _SHARED.update(ops=ops, jobs=jobs, counter=self._counter, results=self._results)
        try:
            for _ in range(workers):
                worker = ctx.Process(target=_work, daemon=True)
                worker.start()
                self._workers.append(worker)
        except OSError:  # cannot fork (out of memory, process limit): do it all here
            pass
        finally:
            _SHARED.clear()

    def results(self) -> list[ReplayRun]:
        """Every job's replay, in order: this process takes the jobs no worker has started."""
        if self._counter is None:
            return [replay_peaks(self._ops, *job) for job in self._jobs]
        runs: dict[int, ReplayRun] = {}
        while (index := take(self._counter, len(self._jobs))) is not None:
            runs[index] = replay_peaks(self._ops, *self._jobs[index])
        while len(runs) < len(self._jobs):
            try:
                index, run = self._results.get(timeout=1.0)
            except queue.Empty:
                if any(w.is_alive() for w in self._workers):
                    continue
                break  # a worker died (killed for memory?): its job is done below
            runs[index] = run
        for worker in self._workers:
            worker.join()
        self._results.close()
        return [
            runs[i] if i in runs else replay_peaks(self._ops, *job)
            for i, job in enumerate(self._jobs)
        ]

    def cancel(self) -> None:
        """Stop the workers; the results are not needed."""
        for worker in self._workers:
            worker.terminate()
            worker.join()
        if self._results is not None:
            self._results.close()
            self._results.cancel_join_thread()
        self._workers = []
        self._counter = None
