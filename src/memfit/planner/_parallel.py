"""Run the planner's independent searches in forked worker processes.

A trace is single-threaded Python, so on a machine of several cores the planner traces several
candidates at once: each job (one precision and checkpointing's bisection, or one candidate's
evaluation) runs in a process forked from this one, which already holds the workload (its model
factory and batch maker need not be picklable) and has torch and the model's library imported.
A job returns the candidates it evaluated; the parent merges them (:mod:`memfit._forked` owns
the processes: Ctrl-C stops them at once and leaves none behind).

The jobs run here, one after the other, with one worker; where ``fork`` is not available
(Windows); where CUDA is initialized in this process (a training script or notebook that has
used the GPU: a forked child cannot use CUDA, and the trace asks it about the device); and for
a job PyTorch refuses in a child (this process had started autograd's device threads).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from memfit._forked import Failed, can_fork, cpu_count, forked_call, run_forked
from memfit.planner._plan_result import Candidate, Evaluated
from memfit.planner._search import Evaluator

__all__ = ["default_workers", "fork_safe", "run_jobs", "run_traces", "workers_can_trace"]

T = TypeVar("T")
R = TypeVar("R")
_BAD_FORK = "autograd's threading in combination with fork"  # PyTorch's refusal in a child
_Result = tuple[dict[Candidate, Evaluated], int] | None  # what a job evaluated, its traces


def default_workers() -> int:
    """The cores this process may use, at most 4 (each worker holds a trace in memory)."""
    return max(1, min(4, cpu_count()))


def fork_safe() -> bool:
    """Whether a process forked from this one can trace: ``fork`` exists and this process has
    not initialized CUDA (a child of a CUDA process fails its first CUDA call)."""
    import torch

    return can_fork() and not torch.cuda.is_initialized()


def run_jobs(
    ev: Evaluator,
    job: Callable[[Evaluator, T], None],
    items: Sequence[T],
    workers: int,
    done: Callable[[int, int], None] = lambda n, total: None,
) -> None:
    """``job(ev, item)`` for each item, in ``workers`` processes; every candidate a job
    evaluates ends up in ``ev.seen`` and its traces in ``ev.traces``."""
    if workers <= 1 or len(items) <= 1 or not workers_can_trace():
        _run_here(ev, job, items, 0, len(items), done)
        return
    here: list[T] = []  # jobs a worker could not run: run in this process
    failure: BaseException | None = None
    finished = 0

    def merge(index: int, result: _Result | Failed) -> None:
        nonlocal failure, finished
        if isinstance(result, Failed):
            failure = failure or result.error
        elif result is None:
            here.append(items[index])
        else:
            ev.seen.update(result[0])
            ev.traces += result[1]
            finished += 1
            done(finished, len(items))

    def work(index: int) -> _Result:
        return _evaluated_by(ev, job, items[index])

    lost = run_traces(work, len(items), workers, merge)
    if failure is not None:
        raise failure
    _run_here(ev, job, [*here, *(items[i] for i in lost)], finished, len(items), done)


def workers_can_trace() -> bool:
    """Whether processes forked from this one can trace: :func:`fork_safe`, and PyTorch runs
    autograd in them (:func:`_children_can_backward`)."""
    return fork_safe() and _children_can_backward()


def run_traces(
    work: Callable[[int], R],
    count: int,
    workers: int,
    on_result: Callable[[int, R | Failed], None],
) -> list[int]:
    """:func:`memfit._forked.run_forked` for jobs that trace: each worker runs torch on one
    thread (an OpenMP pool the parent used hangs a forked child that enters it)."""
    return run_forked(work, count, workers, on_result, setup=_one_thread)


def _run_here(
    ev: Evaluator,
    job: Callable[[Evaluator, T], None],
    items: Sequence[T],
    finished: int,
    total: int,
    done: Callable[[int, int], None],
) -> None:
    for i, item in enumerate(items):
        job(ev, item)
        done(finished + i + 1, total)


def _evaluated_by(ev: Evaluator, job: Callable[[Evaluator, T], None], item: T) -> _Result:
    """One job in a worker: what it evaluated, or None where autograd cannot run in a forked
    process (this process had started autograd's device threads before forking: PyTorch then
    refuses every backward in the child) and the parent must run it."""
    before = set(ev.seen)
    traces = ev.traces
    try:
        job(ev, item)
    except Exception as exc:  # PyTorch's refusal may come wrapped in memfit's TraceError
        if _BAD_FORK in str(exc):
            return None
        raise
    return {c: e for c, e in ev.seen.items() if c not in before}, ev.traces - traces


def _children_can_backward() -> bool:
    """Whether a process forked from this one can run autograd: PyTorch refuses it in every
    child once this process has started autograd's device threads (a backward on a GPU, as a
    user's training has run before planning)."""
    return forked_call(_backward_probe) == 0


def _backward_probe() -> None:
    import torch

    x = torch.ones(1, device="meta", requires_grad=True)
    x.sum().backward()


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)
