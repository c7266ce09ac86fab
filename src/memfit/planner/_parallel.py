"""Run the planner's independent searches in forked worker processes.

A trace is single-threaded Python, so on a machine of several cores the planner traces several
candidates at once: each job (one precision and checkpointing's bisection, or one candidate's
evaluation) runs in a process forked from this one, which already holds the workload (its model
factory and batch maker need not be picklable) and has torch and the model's library imported.
A job returns the candidates it evaluated; the parent merges them. With one worker, or where
``fork`` is not available (Windows, macOS's default), the jobs run here, one after the other; so
does a job PyTorch refuses in the child (where this process had started autograd's device
threads before forking).
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
_BAD_FORK = "autograd's threading in combination with fork"  # PyTorch's refusal in a child


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
    context = multiprocessing.get_context("fork")
    if not _children_can_backward(context):  # every job would be refused: run them here
        run_jobs(ev, job, items, 1, done)
        return
    _JOB = (ev, job)  # type: ignore[assignment]
    here: list[T] = []  # jobs a forked worker could not run: run in this process
    failure: BaseException | None = None
    try:
        # every job runs to its end and the pool is closed, not terminated: terminating it while
        # its task thread still feeds the workers can deadlock on the task queue's lock (seen
        # in CI when a job raised)
        pool = context.Pool(min(workers, len(items)), initializer=_one_thread)
        try:
            for i, (index, result) in enumerate(pool.imap_unordered(_run, enumerate(items))):
                if isinstance(result, _Failed):
                    failure = failure or result.error
                elif result is None:
                    here.append(items[index])
                else:
                    ev.seen.update(result[0])
                    ev.traces += result[1]
                    done(i + 1 - len(here), len(items))
        finally:
            pool.close()
            pool.join()
    finally:
        _JOB = None
    if failure is not None:
        raise failure
    for i, item in enumerate(here):
        job(ev, item)
        done(len(items) - len(here) + i + 1, len(items))


def _children_can_backward(context: Any) -> bool:
    """Whether a process forked from this one can run autograd: PyTorch refuses it in every
    child once this process has started autograd's device threads (a backward on a GPU, as a
    user's training has run before planning)."""
    probe = context.Process(target=_backward_probe)
    probe.start()
    probe.join()
    return bool(probe.exitcode == 0)


def _backward_probe() -> None:
    import torch

    x = torch.ones(1, device="meta", requires_grad=True)
    try:
        x.sum().backward()
    except RuntimeError:
        os._exit(1)
    os._exit(0)


def _picklable(exc: Exception) -> BaseException:
    """``exc``, or a RuntimeError saying what it was where it cannot be sent back."""
    import pickle

    try:
        pickle.dumps(exc)
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


class _Failed:
    """A job that raised, sent back to the parent as a value."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _run(
    indexed: tuple[int, Any],
) -> tuple[int, tuple[dict[Candidate, Evaluated], int] | _Failed | None]:
    """One job in a worker: what it evaluated, or None where autograd cannot run in a forked
    process (this process had started autograd's device threads before forking: PyTorch then
    refuses every backward in the child) and the parent must run it."""
    assert _JOB is not None
    ev, job = _JOB
    index, item = indexed
    before = set(ev.seen)
    traces = ev.traces
    try:
        job(ev, item)
    except Exception as exc:
        if _BAD_FORK in str(exc):
            return index, None
        return index, _Failed(_picklable(exc))
    return index, ({c: e for c, e in ev.seen.items() if c not in before}, ev.traces - traces)
