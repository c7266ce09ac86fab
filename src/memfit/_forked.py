"""Run work in forked worker processes that Ctrl-C stops at once, leaving none behind.

A forked worker inherits its work (closures over a model factory, a trace's operations)
without pickling it; only small messages go over a pipe, one to each worker. This module owns
the processes, not a :class:`multiprocessing.pool.Pool`: a pool's task and result threads hold
locks that a worker killed mid-job, or a parent interrupted mid-call, can leave held, and
``pool.terminate()`` then hangs.

Two ways to use them:

* :func:`run_forked` runs jobs ``0..count-1`` to the end, handing each out and each result back
  as it comes (the planner's traces);
* :class:`ForkedPool` starts workers that work while this process does something else: each
  reads what this process sends it, in order, and the workers and this process take turns at
  shared jobs (:func:`share_jobs`), one index at a time from a counter in shared memory, so
  a core never waits while a job does (a snapshot's what-if replays).

On Ctrl-C the parent (and only the parent) raises :class:`KeyboardInterrupt`: workers ignore
SIGINT from before their first instruction (it is blocked across the fork), so the terminal's
signal to the whole process group prints no worker tracebacks; the parent kills every worker
and reaps it before the interrupt goes on (:func:`kill_workers` at a command's abrupt exit). A
worker that dies (killed for memory, say) loses only the job it held, for the caller to run.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import queue
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import partial
from multiprocessing.connection import Connection, wait
from typing import Any, Generic, TypeVar

__all__ = [
    "Failed",
    "ForkedPool",
    "WorkerLink",
    "can_fork",
    "cpu_count",
    "forked_call",
    "kill_workers",
    "run_forked",
    "share_jobs",
]

R = TypeVar("R")
_LIVE: set[Any] = set()  # every worker forked here and not yet reaped (kill_workers)
_Target = Callable[[Connection], None]  # what a worker runs, given its end of the pipe
_STOP = object()  # tells a ForkedPool's sending thread to end


@dataclass
class Failed:
    """A job that raised in a worker: its exception (or a RuntimeError saying what it was,
    where it could not be pickled)."""

    error: BaseException


class _Finished:
    """A :class:`ForkedPool` worker's last message: its work returned (it did not die)."""


def can_fork() -> bool:
    """Whether this platform forks (not Windows; macOS forks, though it spawns by default)."""
    return "fork" in multiprocessing.get_all_start_methods()


def cpu_count() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


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


def _outcome(work: Callable[[int], R], index: int) -> R | Failed:
    """``work(index)``, or how it failed."""
    try:
        return work(index)
    except Exception as exc:
        return Failed(_picklable(exc))


def _child(target: _Target, conn: Connection, siblings: list[Connection]) -> None:
    """A worker: quiet on Ctrl-C, then ``target`` on its end of the pipe. The parent's ends of
    the other workers' pipes, inherited by the fork, are closed: a worker sees its own pipe
    close when the parent is gone."""
    _quiet_child()
    for other in siblings:
        other.close()
    target(conn)


def _fork(target: _Target, count: int) -> dict[Connection, Any]:
    """``count`` workers forked, each running ``target``: the parent's ends of their pipes and
    their processes. Where a fork fails (``OSError``), those already forked are killed first."""
    context = multiprocessing.get_context("fork")
    conns: dict[Connection, Any] = {}
    try:
        with _sigint_blocked():
            for _ in range(count):
                parent_end, child_end = context.Pipe()
                siblings = list(conns)  # the parent's ends the fork hands down
                process = context.Process(
                    target=_child, args=(target, child_end, siblings), daemon=True
                )
                conns[parent_end] = process
                try:
                    process.start()
                finally:
                    child_end.close()
                _LIVE.add(process)
    except BaseException:
        _stop(conns, kill=True)
        raise
    return conns


def _stop(conns: dict[Connection, Any], *, kill: bool) -> None:
    """Every worker ended and reaped: killed, or (its work done) left to exit."""
    for conn, process in conns.items():
        if process.pid is not None:  # started
            if kill and process.is_alive():
                process.kill()
            process.join()
            _LIVE.discard(process)
        conn.close()
    conns.clear()


def _serve(work: Callable[[int], Any], setup: Callable[[], None] | None, conn: Connection) -> None:
    """A :func:`run_forked` worker's loop: run the job whose index comes in, send back its
    result or failure, until the parent sends ``None``."""
    if setup is not None:
        setup()
    while (index := conn.recv()) is not None:
        conn.send((index, _outcome(work, index)))
    conn.close()


class _Workers(Generic[R]):
    """The forked workers of one :func:`run_forked` call and the job each holds."""

    def __init__(
        self, work: Callable[[int], R], setup: Callable[[], None] | None, count: int
    ) -> None:
        self.conns = _fork(partial(_serve, work, setup), count)  # parent's end -> its process
        self.holding: dict[Connection, int] = {}  # parent's end -> the job it runs

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
        _stop(pool.conns, kill=not done)


def _take(counter: Any, count: int) -> int | None:
    """The next job index from a shared counter, or None when all ``count`` are taken."""
    with counter.get_lock():
        index = int(counter.value)
        if index >= count:
            return None
        counter.value = index + 1
        return index


class WorkerLink:
    """A :class:`ForkedPool` worker's side: what the parent sent, what goes back to it, and the
    shared jobs' counter."""

    def __init__(self, conn: Connection, counter: Any) -> None:
        self._conn = conn
        self._counter = counter

    def recv(self) -> Any:
        """The next thing the parent sent (:meth:`ForkedPool.send`), waiting for it."""
        return self._conn.recv()

    def send(self, message: object) -> None:
        """``message`` to the parent (:meth:`ForkedPool.messages`)."""
        self._conn.send(message)

    def take(self, count: int) -> int | None:
        """The index of the next shared job not yet taken (by any worker or the parent), or
        None when all ``count`` are."""
        return _take(self._counter, count)


def share_jobs(link: WorkerLink, work: Callable[[int], Any], count: int) -> None:
    """In a :class:`ForkedPool` worker: ``work(i)`` for each job index ``i`` it takes of
    ``count``, sending the parent ``(i, result)`` (the result a :class:`Failed` if it raised)."""
    while (index := link.take(count)) is not None:
        link.send((index, _outcome(work, index)))


def _linked(target: Callable[[WorkerLink], None], counter: Any, conn: Connection) -> None:
    """A :class:`ForkedPool` worker: ``target`` with its link, then :class:`_Finished` (after a
    :class:`Failed` where ``target`` raised)."""
    link = WorkerLink(conn, counter)
    try:
        target(link)
    except Exception as exc:
        link.send(Failed(_picklable(exc)))
    link.send(_Finished())
    conn.close()


class ForkedPool:
    """``workers`` processes forked now, each running ``target(link)`` (a :class:`WorkerLink`)
    while this process goes on; :meth:`close` when done with them, in any case.

    This process sends the workers what they need as it has it (:meth:`send`: in order, without
    waiting for them to read it), takes shared jobs from the counter they take from
    (:meth:`take`, :func:`share_jobs`) and reads what they send back (:meth:`messages`). Raises
    ``OSError`` where the processes cannot be forked.
    """

    def __init__(self, target: Callable[[WorkerLink], None], workers: int) -> None:
        self._counter = multiprocessing.get_context("fork").Value("i", 0)
        self._conns = _fork(partial(_linked, target, self._counter), workers)
        self._outbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._sender: threading.Thread | None = None
        self.died = 0  # workers that ended without finishing (killed, say)

    def send(self, message: object) -> None:
        """``message`` to every worker, after those sent before; a thread of this process
        writes it to their pipes (not to one that has ended), so this does not wait."""
        if self._sender is None:
            self._sender = threading.Thread(target=self._send_all, daemon=True)
            self._sender.start()
        self._outbox.put(message)

    def _send_all(self) -> None:
        while (message := self._outbox.get()) is not _STOP:
            for conn in self._conns:
                with suppress(OSError):  # the worker has ended
                    conn.send(message)

    def take(self, count: int) -> int | None:
        """The index of the next shared job not yet taken, for this process to run; None when
        all ``count`` are."""
        return _take(self._counter, count)

    def messages(self) -> Iterator[Any]:
        """What the workers send, as it comes, until every one has finished or died (counted
        in :attr:`died`): a :class:`Failed` where a worker's ``target`` raised."""
        running = list(self._conns)
        while running:
            for ready in wait(running):
                assert isinstance(ready, Connection)
                try:
                    message = ready.recv()
                except (EOFError, OSError):
                    self.died += 1
                    running.remove(ready)
                    continue
                if isinstance(message, _Finished):
                    running.remove(ready)
                else:
                    yield message

    def close(self) -> None:
        """Every worker killed (where it still runs) and reaped, the sending thread ended."""
        for process in self._conns.values():
            if process.is_alive():
                process.kill()  # a send to it fails now: the sending thread cannot block
        if self._sender is not None:
            self._outbox.put(_STOP)
            self._sender.join()
            self._sender = None
        _stop(self._conns, kill=True)


def kill_workers() -> None:
    """Kill every worker forked here that is still running (a process about to exit at once,
    on Ctrl-C)."""
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
