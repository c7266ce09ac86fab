"""Forked workers that stay up while this process works (:class:`memfit._forked.ForkedPool`):
messages reach them in order without this process waiting, shared jobs run once each, a
failure or a death comes back as such, Ctrl-C is this process's alone, and none is left."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

from memfit import _forked
from memfit._forked import Failed, ForkedPool, WorkerLink, can_fork, share_jobs

pytestmark = pytest.mark.skipif(not can_fork(), reason="needs fork")


def _sum_until_none(link: WorkerLink) -> None:
    time.sleep(0.5)  # busy: this process must not wait for it to read
    total = []
    while (message := link.recv()) is not None:
        total.append(message[0])
    link.send(total)


def test_messages_arrive_in_order_without_the_sender_waiting() -> None:
    pool = ForkedPool(_sum_until_none, 1)
    try:
        started = time.monotonic()
        for i in range(20):
            pool.send((i, b"x" * (1 << 20)))  # far more than a pipe holds
        pool.send(None)
        assert time.monotonic() - started < 0.4
        assert list(pool.messages()) == [list(range(20))]
        assert pool.died == 0
    finally:
        pool.close()
    assert not _forked._LIVE


def _square_or_fail(index: int) -> int:
    if index == 3:
        raise ValueError("job 3 is broken")
    return index * index


def test_shared_jobs_run_once_each_in_the_workers_or_here() -> None:
    count = 12
    pool = ForkedPool(lambda link: share_jobs(link, _square_or_fail, count), 2)
    try:
        here = {}
        while (index := pool.take(count)) is not None:
            here[index] = index * index
            time.sleep(0.05)
        theirs = dict(pool.messages())
    finally:
        pool.close()
    assert sorted([*here, *theirs]) == list(range(count))
    failed = {i: r for i, r in theirs.items() if isinstance(r, Failed)}
    if 3 in theirs:
        assert list(failed) == [3] and "job 3 is broken" in str(failed[3].error)
    assert all(theirs[i] == i * i for i in theirs if i not in failed)


def _raises(link: WorkerLink) -> None:
    raise RuntimeError("the worker's own error")


def _dies(link: WorkerLink) -> None:
    os._exit(1)


def test_a_failure_and_a_death_come_back_as_such() -> None:
    pool = ForkedPool(_raises, 1)
    try:
        (failed,) = pool.messages()
    finally:
        pool.close()
    assert isinstance(failed, Failed) and "the worker's own error" in str(failed.error)
    pool = ForkedPool(_dies, 2)
    try:
        assert list(pool.messages()) == [] and pool.died == 2
    finally:
        pool.close()


def _pid_then_wait(link: WorkerLink) -> None:
    link.send(os.getpid())
    link.recv()


def test_ctrl_c_does_not_reach_a_worker_and_close_kills_it() -> None:
    pool = ForkedPool(_pid_then_wait, 1)
    messages = pool.messages()
    pid = next(messages)
    os.kill(pid, signal.SIGINT)
    time.sleep(0.2)
    os.kill(pid, 0)  # still running: SIGINT is ignored there
    pool.send("more")  # read, but the worker sends nothing back before it finishes
    assert list(messages) == [] and pool.died == 0
    pool.close()
    assert not _forked._LIVE
    pool = ForkedPool(_pid_then_wait, 1)
    pid = next(pool.messages())
    pool.close()  # still waiting for a message: killed
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_fork_that_fails_leaves_no_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    import multiprocessing.process

    started: list[Any] = []
    real_start = multiprocessing.process.BaseProcess.start

    def start(self: Any) -> None:
        if started:
            raise OSError("Cannot allocate memory")
        real_start(self)
        started.append(self)

    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", start)
    with pytest.raises(OSError, match="Cannot allocate memory"):
        ForkedPool(_pid_then_wait, 3)
    assert len(started) == 1 and not started[0].is_alive() and not _forked._LIVE
