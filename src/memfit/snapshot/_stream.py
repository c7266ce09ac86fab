"""Replay what-if settings while the snapshot is still being read, on another core.

Reading a large snapshot keeps one core busy for a while and leaves the others idle. The
settings whose replay does not depend on anything learnt at the end of the file (the
recorded settings come after the trace; the garbage-collection what-if needs the recorded
peak) can start at once: :class:`StreamingReplays` forks one worker at the first batch of
trace entries and sends it every batch (the kept entries, as arrays). The worker turns them
into the same operations as ``_replay.build_ops`` (an allocation or free per event, an
``empty_cache`` at each run of segment frees) and runs them through one emulated allocator
per setting.

The results hold only for a trace that starts empty and for the device that was streamed;
otherwise the caller drops them and replays the usual way.
"""

from __future__ import annotations

import multiprocessing
import queue
from array import array
from contextlib import suppress
from multiprocessing.process import BaseProcess
from typing import Any

import numpy as np
import numpy.typing as npt

from memfit._errors import InvalidInputError
from memfit.allocator import ALLOC, EMPTY_CACHE, FREE, AllocatorReplay, ReplayOps
from memfit.snapshot._collect import ALLOC as ENTRY_ALLOC
from memfit.snapshot._collect import FREE as ENTRY_FREE
from memfit.snapshot._collect import SEGMENT_FREE, SEGMENT_UNMAP
from memfit.snapshot._parallel import Job, take
from memfit.snapshot._replay import ReplayRun, replay_peaks, run_result, start_replay

__all__ = ["STREAM_MIN_BYTES", "StreamingReplays"]

STREAM_MIN_BYTES = 32 << 20  # smaller files are read in a second or two: not worth a fork

Batch = tuple[
    npt.NDArray[np.int8], npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]
]


class _Replayer:
    """One setting's replay, fed operations batch by batch."""

    def __init__(self, job: Job) -> None:
        self.run = ReplayRun()
        self.replay: AllocatorReplay | None = start_replay(self.run, *job)

    def feed(self, ops: ReplayOps) -> None:
        if self.replay is not None:
            # a free of a block from before the trace stops it: kept in replay.error
            with suppress(InvalidInputError):
                self.replay.run(ops)

    def result(self) -> ReplayRun:
        return self.run if self.replay is None else run_result(self.run, self.replay)


def _operations(batch: Batch, shrinking: bool) -> tuple[list[npt.NDArray[np.int64]], bool]:
    """A batch's operations (kind, block, size, stream), and whether it ends in a run of
    segment frees."""
    codes, addr, size, stream = batch
    shrink = (codes == SEGMENT_FREE) | (codes == SEGMENT_UNMAP)
    before = np.concatenate(([shrinking], shrink[:-1])) if len(shrink) else shrink
    is_alloc, is_free = codes == ENTRY_ALLOC, codes == ENTRY_FREE
    take = is_alloc | is_free | (shrink & ~before)
    kinds = np.where(is_alloc, ALLOC, np.where(is_free, FREE, EMPTY_CACHE))[take]
    ops = [kinds.astype(np.int64), addr[take], size[take], stream[take]]
    return ops, bool(shrink[-1]) if len(shrink) else shrinking


def _as_ops(parts: list[list[npt.NDArray[np.int64]]]) -> ReplayOps:
    """The batches' operations as one :class:`~memfit.allocator.ReplayOps`, freeing each batch
    once copied."""
    columns: list[array[int]] = [array("q") for _ in range(4)]
    parts.reverse()
    while parts:
        part = parts.pop()
        for column, values in zip(columns, part, strict=True):
            column.frombytes(values.tobytes())
    return ReplayOps(kind=columns[0], block=columns[1], size=columns[2], stream=columns[3])


def _work(jobs: list[Job], inbox: Any, outbox: Any, counter: Any) -> None:
    """Replay the batches as they come; then take a share of the jobs the reader adds."""
    replayers = [_Replayer(job) for job in jobs]
    parts: list[list[npt.NDArray[np.int64]]] = []
    shrinking = False
    while not isinstance(message := inbox.get(), list):
        ops, shrinking = _operations(message, shrinking)
        parts.append(ops)
        batch_ops = ReplayOps(*(column.tolist() for column in ops))
        for replayer in replayers:
            replayer.feed(batch_ops)
    outbox.put(("streamed", [r.result() for r in replayers]))
    extra: list[Job] = message
    if extra:
        whole = _as_ops(parts)
        while (index := take(counter, len(extra))) is not None:
            outbox.put(("extra", index, replay_peaks(whole, *extra[index])))
    outbox.put(("done", None))


class StreamingReplays:
    """A worker replaying ``jobs`` on trace batches as they are read (see the module doc).

    After the last batch, :meth:`finish` gives it more jobs (settings known only once the
    file is read), which this process shares with it: both :meth:`take` the next job.
    """

    def __init__(self, jobs: list[Job]) -> None:
        self.jobs = jobs
        self._ctx = multiprocessing.get_context("fork")
        self._inbox: Any = None
        self._outbox: Any = None
        self._counter: Any = None
        self._extra: list[Job] = []
        self._worker: BaseProcess | None = None
        self.broken = False
        self.completed = False  # the worker sent everything and finished

    def feed(self, codes: Any, addr: Any, size: Any, stream: Any) -> None:
        """Send one batch of kept trace entries (in order) to the worker, starting it first."""
        if self.broken:
            return
        if self._worker is None:
            try:
                self._inbox, self._outbox = self._ctx.Queue(), self._ctx.Queue()
                self._counter = self._ctx.Value("i", 0)
                self._worker = self._ctx.Process(
                    target=_work,
                    args=(self.jobs, self._inbox, self._outbox, self._counter),
                    daemon=True,
                )
                self._worker.start()
            except OSError:  # cannot fork: the what-ifs run after reading instead
                self.broken = True
                return
        self._inbox.put((codes, addr, size, stream))

    @property
    def running(self) -> bool:
        return self._worker is not None and not self.broken

    def finish(self, extra: list[Job]) -> None:
        """No more batches; ``extra`` jobs are to be shared between the worker and the caller."""
        self._extra = extra
        if self.running:
            self._inbox.put(list(extra))

    def take(self) -> int | None:
        """The index (in ``extra``) of the next job for the caller; None when all are taken."""
        if not self.running:
            return None
        return take(self._counter, len(self._extra))

    def results(self) -> tuple[list[ReplayRun] | None, dict[int, ReplayRun]]:
        """The streamed replays (None if the worker could not finish them) and the extra
        jobs it did, by index."""
        streamed: list[ReplayRun] | None = None
        extra: dict[int, ReplayRun] = {}
        if not self.running:
            return None, extra
        done = False
        while not done:
            try:
                kind, *payload = self._outbox.get(timeout=1.0)
            except queue.Empty:
                if self._worker is not None and self._worker.is_alive():
                    continue
                break  # the worker died: what it did not send is done by the caller
            if kind == "streamed":
                streamed = payload[0]
            elif kind == "extra":
                extra[payload[0]] = payload[1]
            else:
                done = self.completed = True
        self.close()
        return streamed, extra

    def close(self) -> None:
        """Stop the worker (if it still runs) and free the queues."""
        if self._worker is not None:
            if self._worker.is_alive():
                self._worker.terminate()
            self._worker.join()
            self._worker = None
        for q in (self._inbox, self._outbox):
            if q is not None:
                q.close()
                q.cancel_join_thread()
        self._inbox = self._outbox = None
