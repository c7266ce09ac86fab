"""Run independent jobs in forked worker processes that Ctrl-C stops at once, leaving none behind.

A forked worker inherits the jobs (closures over a model factory, a trace's operations) without
pickling them; only a job's index goes out and its result comes back, over a pipe. This
module owns the processes, not a :class:`multiprocessing.pool.Pool`: a pool's task and result
threads hold locks that a worker killed mid-job, or a parent interrupted mid-call, can leave
held, and ``pool.terminate()`` then hangs.

On Ctrl-C the parent (and only the parent) raises :class:`KeyboardInterrupt`: workers ignore
SIGINT from before their first instruction (it is blocked across the fork), so the terminal's
signal to the whole process group prints no worker tracebacks; the parent kills every worker
and reaps it before the interrupt goes on. A worker that dies (killed for memory, say) loses
only the job it held: its index comes back for the caller to run.
"""

from __future__ import annotations

import multiprocessing
import pickle
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Generic, TypeVar

__all__ = ["Failed", "can_fork", "forked_call", "kill_workers", "run_forked"]

R = TypeVar("R")
_LIVE: set[Any] = set()  # the workers of every run_forked call in progress (kill_workers)


@dataclass
class Failed:
    """A job that raised in a worker: its exception (or a RuntimeError saying what it was,
    where it could not be pickled)."""

    error: BaseException


def can_fork() -> bool:
    """Whether this platform forks (not Windows; macOS forks, though it spawns by default)."""
    return "fork" in multiprocessing.get_all_start_methods()


@contextmanager
def _sigint_blocked() -> Iterator[None]:
    """SIGINT held back while workers are forked: a child starts with it blocked, ignores it,
    then unblocks; the parent gets a Ctrl-C of that moment when this ends."""
    block = hasattr(signal, "pthread_sigmask")
    if block:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        if block:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _quiet_child() -> None:
    """In a worker: Ctrl-C is the parent's to handle."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _picklable(exc: BaseException) -> BaseException:
    try:
        pickle.dumps(exc)
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


def _serve(
    work: Callable[[int], Any],
    setup: Callable[[], None] | None,
    conn: Connection,
    siblings: list[Connection],
) -> None:
    """A worker's loop: run the job whose index comes in, send back its result or failure,
    until the parent sends ``None``. The parent's ends of the other workers' pipes, inherited
    by the fork, are closed: a worker sees its own pipe close when the parent is gone."""
    _quiet_child()
    for other in siblings:
        other.close()
    if setup is not None:
        setup()
    while (index := conn.recv()) is not None:
        try:
            result: Any = work(index)
        except Exception as exc:
            result = Failed(_picklable(exc))
        conn.send((index, result))
    conn.close()


class _Workers(Generic[R]):
    """The forked workers of one :func:`run_forked` call and the job each holds."""

    def __init__(
        self, work: Callable[[int], R], setup: Callable[[], None] | None, count: int
    ) -> None:
        context = multiprocessing.get_context("fork")
        self.conns: dict[Connection, Any] = {}  # parent's end -> its process
        self.holding: dict[Connection, int] = {}  # parent's end -> the job it runs
        with _sigint_blocked():
            for _ in range(count):
                parent_end, child_end = context.Pipe()
                siblings = list(self.conns)  # the parent's ends the fork hands down
                process = context.Process(
                    target=_serve, args=(work, setup, child_end, siblings), daemon=True
                )
                process.start()
                _LIVE.add(process)
                child_end.close()
                self.conns[parent_end] = process

    def connection(self, ready: object) -> Connection:
        """The parent's end of a pipe that :func:`multiprocessing.connection.wait` found
        ready."""
        assert isinstance(ready, Connection) and ready in self.conns
        return ready

    def give(self, conn: Connection, index: int | None) -> None:
        """Send ``conn``'s worker the job ``index``, or ``None``: no more."""
        conn.send(index)
        if index is None:
            self.holding.pop(conn, None)
        else:
            self.holding[conn] = index

    def stop(self, *, kill: bool) -> None:
        """Every worker ended and reaped: killed, or (its work done) left to exit."""
        for conn, process in self.conns.items():
            if kill and process.is_alive():
                process.kill()
            process.join()
            _LIVE.discard(process)
            conn.close()
        self.conns.clear()


def run_forked(
    work: Callable[[int], R],
    count: int,
    workers: int,
    on_result: Callable[[int, R | Failed], None],
    setup: Callable[[], None] | None = None,
) -> list[int]:
    """``work(i)`` for ``i`` in ``range(count)`` in ``workers`` forked processes, each result
    (or :class:`Failed`) handed to ``on_result(i, result)`` in this process as it arrives;
    ``setup()`` runs once in each worker first. Returns the indices whose worker died before it
    answered, for the caller to run. On any exception here (Ctrl-C included) every worker is
    killed and reaped before it propagates."""
    pool: _Workers[R] = _Workers(work, setup, min(workers, count))
    done = False
    try:
        pending = iter(range(count))
        for conn in list(pool.conns):
            pool.give(conn, next(pending, None))
        lost: list[int] = []
        while pool.holding:
            for ready in wait(list(pool.holding)):
                conn = pool.connection(ready)
                try:
                    index, result = conn.recv()
                except (EOFError, OSError):  # the worker died: its job is the caller's
                    lost.append(pool.holding.pop(conn))
                    continue
                pool.holding.pop(conn)
                on_result(index, result)
                pool.give(conn, next(pending, None))
        done = True
        return [*lost, *pending]  # the jobs no worker was left to take
    finally:
        pool.stop(kill=not done)


def kill_workers() -> None:
    """Kill every worker of the :func:`run_forked` calls in progress (a process about to exit
    at once, on Ctrl-C)."""
    for process in list(_LIVE):
        with suppress(OSError, ValueError, AttributeError):  # already gone
            process.kill()
    _LIVE.clear()


def forked_call(fn: Callable[[], Any]) -> int:
    """Run ``fn()`` in a forked process that ignores Ctrl-C; its exit code (0 when it returned,
    1 when it raised). Killed and reaped if this process is interrupted meanwhile."""
    outcome: list[int] = []

    def run(_: int) -> bool:
        fn()
        return True

    lost = run_forked(run, 1, 1, lambda _, r: outcome.append(0 if r is True else 1))
    return 1 if lost else outcome[0]
