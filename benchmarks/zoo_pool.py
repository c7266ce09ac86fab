"""Worker processes for the zoo sweep's CPU jobs: each job in a long-lived worker (torch,
transformers and timm imported once), a time limit per job, and a worker that hangs, dies or
grows is replaced without stopping the sweep.

A worker reads one JSON job a line on its standard input and answers one JSON line on a
descriptor of its own (the libraries' prints go to the log); the parent hands out jobs, waits
for answers, and kills a worker whose job ran past the limit (recorded as a timeout).

    pool = Pool(workers=1, timeout=600, log=Path("zoo.log"))
    pool.run(jobs, on_result)          # on_result(job, answer) as each answer comes
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TextIO

__all__ = ["Pool", "serve"]

ZOO = Path(__file__).resolve().parent / "zoo.py"
RECYCLE = 40  # jobs a worker runs before a fresh one takes over (memory the libraries keep)


class _Worker:
    def __init__(
        self,
        command: list[str],
        log: TextIO,
        answers: queue.Queue[tuple[_Worker, str | None]],
    ) -> None:
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_VERBOSITY": "error",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
        read, write = os.pipe()
        self.proc = subprocess.Popen(
            [*command, "--answer-fd", str(write)],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=log,
            text=True,
            env=env,
            pass_fds=(write,),
            start_new_session=True,
        )
        os.close(write)
        self.answers = os.fdopen(read, "r")
        self.job: dict[str, Any] | None = None
        self.started = 0.0
        self.done = 0
        threading.Thread(target=self._read, args=(answers,), daemon=True).start()

    def _read(self, answers: queue.Queue[tuple[_Worker, str | None]]) -> None:
        for line in self.answers:
            answers.put((self, line))
        answers.put((self, None))

    def give(self, job: dict[str, Any]) -> None:
        self.job, self.started = job, time.monotonic()
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        """End the worker (its whole process group) and reap it."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


class Pool:
    """``workers`` worker processes, each job limited to ``timeout`` seconds. A worker is
    ``command --answer-fd N`` (by default ``zoo.py worker``)."""

    def __init__(
        self,
        workers: int,
        timeout: float,
        log: Path,
        command: list[str] | None = None,
        recycle: int = RECYCLE,
    ) -> None:
        self.size = workers
        self.recycle = recycle  # jobs a worker runs before a fresh one takes over
        self.timeout = timeout
        self.log = log.open("a")
        self.command = command or [sys.executable, str(ZOO), "worker"]

    def run(
        self,
        jobs: Iterable[dict[str, Any]],
        on_result: Callable[[dict[str, Any], dict[str, Any]], None],
    ) -> None:
        """Run every job; ``on_result(job, answer)`` for each, in the order they finish."""
        pending = list(jobs)
        answers: queue.Queue[tuple[_Worker, str | None]] = queue.Queue()
        workers = [
            _Worker(self.command, self.log, answers) for _ in range(min(self.size, len(pending)))
        ]
        try:
            for worker in workers:
                worker.give(pending.pop(0))
            while any(w.job is not None for w in workers):
                self._wait(workers, pending, answers, on_result)
        finally:
            for worker in workers:
                worker.stop()
            self.log.flush()

    def _wait(
        self,
        workers: list[_Worker],
        pending: list[dict[str, Any]],
        answers: queue.Queue[tuple[_Worker, str | None]],
        on_result: Callable[[dict[str, Any], dict[str, Any]], None],
    ) -> None:
        oldest = min((w for w in workers if w.job is not None), key=lambda w: w.started)
        left = oldest.started + self.timeout - time.monotonic()
        try:
            worker, line = answers.get(timeout=max(0.1, left))
        except queue.Empty:
            if time.monotonic() - oldest.started < self.timeout:
                return
            job = oldest.job
            assert job is not None
            late = {"type": "Timeout", "message": f"no answer in {self.timeout:.0f} s"}
            fresh = self._replace(oldest, workers, answers)
            self._finish(fresh, job, {"error": late}, pending, on_result)
            return
        if worker not in workers or worker.job is None:
            return  # a replaced worker's last words
        job = worker.job
        if line is None:  # the worker died with the job
            died = {"type": "WorkerDied", "message": f"exit code {worker.proc.wait()}"}
            answer: dict[str, Any] = {"error": died}
            worker = self._replace(worker, workers, answers)
        else:
            answer = json.loads(line)
            worker.done += 1
            if worker.done >= self.recycle and pending:
                worker = self._replace(worker, workers, answers)
        self._finish(worker, job, answer, pending, on_result)

    @staticmethod
    def _finish(
        worker: _Worker,
        job: dict[str, Any],
        answer: dict[str, Any],
        pending: list[dict[str, Any]],
        on_result: Callable[[dict[str, Any], dict[str, Any]], None],
    ) -> None:
        worker.job = None
        on_result(job, answer)
        if pending:
            worker.give(pending.pop(0))

    def _replace(
        self,
        worker: _Worker,
        workers: list[_Worker],
        answers: queue.Queue[tuple[_Worker, str | None]],
    ) -> _Worker:
        worker.stop()
        fresh = _Worker(self.command, self.log, answers)
        workers[workers.index(worker)] = fresh
        return fresh


def serve(answer_fd: int, handle: Callable[[dict[str, Any]], dict[str, Any]]) -> int:
    """A worker's loop: a job a line on stdin, ``handle(job)``'s answer a line on
    ``answer_fd``; an exception is the answer's ``error``."""
    import traceback

    out = os.fdopen(answer_fd, "w")
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        try:
            answer = handle(job)
        except Exception as exc:
            answer = {"error": error_of(exc), "traceback": traceback.format_exc()[-4000:]}
        out.write(json.dumps(answer, default=str) + "\n")
        out.flush()
    return 0


def error_of(exc: BaseException) -> dict[str, Any]:
    """An exception as the sweep records it: type, message, and memfit's op, module and phase
    where its message or attributes name them."""
    import re

    message = str(exc)
    found: dict[str, Any] = {"type": type(exc).__name__, "message": message[:2000]}
    phase = re.search(r"during (setup|step\d+\.\w+)", message)
    if phase:
        found["phase"] = phase.group(1)
    for name in ("op", "module", "location"):
        value = getattr(exc, name, None)
        if isinstance(value, str) and value:
            found[name] = value
    return found
