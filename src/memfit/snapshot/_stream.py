"""Replay what-if settings while the snapshot is still being read, on another core.

Reading a large snapshot keeps one core busy for a while and leaves the others idle. The
settings whose replay does not depend on anything learnt at the end of the file (the
recorded settings come after the trace; the garbage-collection what-if needs the recorded
peak) can start at once: :class:`StreamingReplays` forks one worker
(:class:`memfit._forked.ForkedPool`) at the first batch of trace entries and sends it every
batch (the kept entries, as arrays), without waiting for it to read them. The worker turns them
into the same operations as ``_replay.build_ops`` (an allocation or free per event, an
``empty_cache`` at each run of segment frees) and runs them through one emulated allocator
per setting.

The results hold only for a trace that starts empty and for the device that was streamed;
otherwise the caller drops them and replays the usual way.
"""

from __future__ import annotations

from array import array
from contextlib import suppress
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt

from memfit._errors import InvalidInputError
from memfit._forked import Failed, ForkedPool, WorkerLink, share_jobs
from memfit.allocator import ALLOC, EMPTY_CACHE, FREE, AllocatorReplay, ReplayOps
from memfit.snapshot._collect import ALLOC as ENTRY_ALLOC
from memfit.snapshot._collect import FREE as ENTRY_FREE
from memfit.snapshot._collect import SEGMENT_FREE, SEGMENT_UNMAP
from memfit.snapshot._parallel import Job
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


def _work(jobs: list[Job], link: WorkerLink) -> None:
    """Replay the batches as they come; then take a share of the jobs the reader adds."""
    replayers = [_Replayer(job) for job in jobs]
    parts: list[list[npt.NDArray[np.int64]]] = []
    shrinking = False
    while not isinstance(message := link.recv(), list):
        ops, shrinking = _operations(message, shrinking)
        parts.append(ops)
        batch_ops = ReplayOps(*(column.tolist() for column in ops))
        for replayer in replayers:
            replayer.feed(batch_ops)
    link.send([r.result() for r in replayers])
    extra: list[Job] = message
    if extra:
        whole = _as_ops(parts)
        share_jobs(link, lambda index: replay_peaks(whole, *extra[index]), len(extra))


class StreamingReplays:
    """A worker replaying ``jobs`` on trace batches as they are read (see the module doc).

    After the last batch, :meth:`finish` gives it more jobs (settings known only once the
    file is read), which this process shares with it: both :meth:`take` the next job.
    """

    def __init__(self, jobs: list[Job]) -> None:
        self.jobs = jobs
        self._extra: list[Job] = []
        self._pool: ForkedPool | None = None
        self.broken = False  # the worker could not be forked
        self.completed = False  # the worker sent everything and finished

    def feed(self, codes: Any, addr: Any, size: Any, stream: Any) -> None:
        """Send one batch of kept trace entries (in order) to the worker, starting it first."""
        if self.broken:
            return
        if self._pool is None:
            try:
                self._pool = ForkedPool(partial(_work, self.jobs), 1)
            except OSError:  # cannot fork: the what-ifs run after reading instead
                self.broken = True
                return
        self._pool.send((codes, addr, size, stream))

    def finish(self, extra: list[Job]) -> None:
        """No more batches; ``extra`` jobs are to be shared between the worker and the caller."""
        self._extra = extra
        if self._pool is not None:
            self._pool.send(list(extra))

    def take(self) -> int | None:
        """The index (in ``extra``) of the next job for the caller; None when all are taken."""
        if self._pool is None:
            return None
        return self._pool.take(len(self._extra))

    def results(self) -> tuple[list[ReplayRun] | None, dict[int, ReplayRun]]:
        """The streamed replays (None if the worker could not finish them) and the extra
        jobs it did, by index."""
        streamed: list[ReplayRun] | None = None
        extra: dict[int, ReplayRun] = {}
        if self._pool is None:
            return None, extra
        failed = False
        try:
            # what the worker did not send (it died, or failed) is done by the caller
            for message in self._pool.messages():
                if isinstance(message, list):
                    streamed = message
                elif isinstance(message, Failed):
                    failed = True
                elif isinstance(message[1], ReplayRun):  # (index, replay), not a Failed
                    extra[message[0]] = message[1]
            self.completed = not failed and self._pool.died == 0
        finally:
            self.close()
        return streamed, extra

    def close(self) -> None:
        """Stop the worker (if it still runs)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None
