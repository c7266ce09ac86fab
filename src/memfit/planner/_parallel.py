"""Run the planner's independent searches in forked worker processes.

A trace is single-threaded Python, so on a machine of several cores the planner traces several
candidates at once: each job (one precision and checkpointing's bisection, or one candidate's
evaluation) runs in a process forked from this one, which already holds the workload (its model
factory and batch maker need not be picklable) and has torch and the model's library imported.
A job returns the candidates it evaluated; the parent merges them. With one worker, or where
``fork`` is not available (Windows, macOS's default), the jobs run here, one after the other.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from memfit.planner._plan_result import Candidate, Evaluated
from memfit.planner._search import Evaluator

__all__ = ["default_workers", "run_jobs"]

T = TypeVar("T")
_JOB: tuple[Evaluator, Callable[[Evaluator, Any], None]] | None = None  # set before forking


def default_workers() -> int:
    """The cores this process may use, at most 4 (each worker holds a trace in memory)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(4, cores))


def run_jobs(
    ev: Evaluator,
    job: Callable[[Evaluator, T], None],
    items: Sequence[T],
    workers: int,
    done: Callable[[int, int], None] = lambda n, total: None,
) -> None:
    """``job(ev, item)`` for each item, in ``workers`` processes; every candidate a job
    evaluates ends up in ``ev.seen`` and its traces in ``ev.traces``."""
    global _JOB
    if workers <= 1 or len(items) <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        for i, item in enumerate(items):
            job(ev, item)
            done(i + 1, len(items))
        return
    _JOB = (ev, job)  # type: ignore[assignment]
    try:
        context = multiprocessing.get_context("fork")
        with context.Pool(min(workers, len(items)), initializer=_one_thread) as pool:
            for i, (seen, traces) in enumerate(pool.imap_unordered(_run, items)):
                ev.seen.update(seen)
                ev.traces += traces
                done(i + 1, len(items))
    finally:
        _JOB = None


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def _run(item: Any) -> tuple[dict[Candidate, Evaluated], int]:
    assert _JOB is not None
    ev, job = _JOB
    before = set(ev.seen)
    traces = ev.traces
    job(ev, item)
    return {c: e for c, e in ev.seen.items() if c not in before}, ev.traces - traces
