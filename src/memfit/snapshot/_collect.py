"""Copy the trace entries of a snapshot into arrays, batch by batch, and let the dicts go.

``torch.cuda.memory._snapshot()["device_traces"][d]`` is a list of dicts, one per allocator
action: ``{"action", "addr", "size", "stream", "time_us", "frames", ...}``. A
:class:`TraceCollector` keeps, for the actions the analysis needs (``alloc``,
``free_completed``, ``segment_*``, ``oom``), the action code, address, size, stream, time and
the entry's position, in numpy arrays; the other actions are only counted. Of the stack
frames, only each ``alloc``'s site is kept (the first frame outside torch, see ``_sites``), as
a number.

After a batch is copied, its dicts and their ``frames`` lists are emptied, which frees nearly
all their memory even while the unpickler still refers to them.
"""

from __future__ import annotations

import operator
from array import array
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import compress, repeat
from typing import Any

import numpy as np
import numpy.typing as npt

from memfit.snapshot._sites import SiteIndex

__all__ = [
    "ACTION_CODES",
    "ALLOC",
    "FREE",
    "OOM",
    "SEGMENT_ALLOC",
    "SEGMENT_FREE",
    "SEGMENT_MAP",
    "SEGMENT_UNMAP",
    "BadEntry",
    "CollectedTrace",
    "Listener",
    "TraceCollector",
]

ALLOC, FREE, SEGMENT_ALLOC, SEGMENT_FREE, SEGMENT_MAP, SEGMENT_UNMAP, OOM = range(7)
_FREE_REQUESTED = 7
_OTHER = 8
ACTION_CODES: dict[str, int] = {
    "alloc": ALLOC,
    "free_completed": FREE,
    "segment_alloc": SEGMENT_ALLOC,
    "segment_free": SEGMENT_FREE,
    "segment_map": SEGMENT_MAP,
    "segment_unmap": SEGMENT_UNMAP,
    "oom": OOM,
    "free_requested": _FREE_REQUESTED,
}
_CODE_NAMES = {code: name for name, code in ACTION_CODES.items()}
_ALL_FIELDS = operator.itemgetter("action", "addr", "size", "stream", "time_us", "frames")
_FIELDS = operator.itemgetter("action", "addr", "size", "stream")
_TIME = operator.methodcaller("get", "time_us", 0)
_FRAMES = operator.methodcaller("get", "frames")
_STEP = 4096  # entries handled at once: small enough to stay in the CPU caches


# Receives each batch's kept entries (action codes, addresses, sizes, streams), in order.
Listener = Callable[[Any, Any, Any, Any], None]


class BadEntry(Exception):
    """A trace entry is not shaped like torch's; ``index`` is its position in its list."""

    def __init__(self, index: int, problem: str) -> None:
        super().__init__(problem)
        self.index = index
        self.problem = problem


@dataclass(frozen=True)
class CollectedTrace:
    """The kept entries of one device's trace, as arrays of equal length, in trace order."""

    action: npt.NDArray[np.int8]
    addr: npt.NDArray[np.int64]
    size: npt.NDArray[np.int64]
    stream: npt.NDArray[np.int64]
    time_us: npt.NDArray[np.int64]
    position: npt.NDArray[np.int64]  # index of the entry in device_traces[d]
    site: npt.NDArray[np.int32]  # alloc entries: index into sites, or -1 (no frames)
    sites: list[str]  # allocation sites (see _sites), each once
    entries: int  # all entries, kept or not
    counts: dict[str, int]  # entries per action, every action included
    has_time: bool


def _bad_batch(batch: list[Any], start: int) -> BadEntry:
    """Find the first malformed entry of a batch that failed the fast path, and say why."""
    for i, entry in enumerate(batch):
        if type(entry) is not dict:
            return BadEntry(start + i, f"is a {type(entry).__name__}, not a dict")
        for key in ("action", "addr", "size", "stream"):
            if key not in entry:
                return BadEntry(start + i, f"has no '{key}'")
        for key in ("addr", "size", "stream"):
            value = entry[key]
            if type(value) is not int or not 0 <= value < 1 << 63:
                return BadEntry(start + i, f"has '{key}' {value!r}, not a byte count")
        if type(entry["action"]) is not str:
            return BadEntry(start + i, f"has 'action' {entry['action']!r}, not a string")
    return BadEntry(start, "could not be read")


def _with_oom_addresses(batch: list[Any]) -> list[Any]:
    """torch writes ``oom`` entries with ``device_free`` and no ``addr``; give them one."""
    return [
        {**e, "addr": e.get("device_free", 0)}
        if type(e) is dict and e.get("action") == "oom" and "addr" not in e
        else e
        for e in batch
    ]


def _columns(batch: list[Any]) -> list[tuple[Any, ...]]:
    """action, addr, size, stream, time_us, frames of each entry (touching each dict once)."""
    try:
        return list(zip(*map(_ALL_FIELDS, batch), strict=True))
    except KeyError:  # no time_us (torch < 2.1) or no frames (recorded with context=None)
        batch = _with_oom_addresses(batch)
        columns = list(zip(*map(_FIELDS, batch), strict=True))
        columns.append(tuple(map(_TIME, batch)))
        columns.append(tuple(map(_FRAMES, batch)))
        return columns


class TraceCollector:
    """Accumulates one trace list's entries; call :meth:`add` with each new batch."""

    def __init__(self, listener: Listener | None = None) -> None:
        self.listener = listener
        self._chunks: list[tuple[npt.NDArray[Any], ...]] = []
        self._sites = SiteIndex()
        self.entries = 0
        self.counts: Counter[str] = Counter()
        self.has_time = True

    def add(self, items: list[Any], start: int) -> None:
        """Copy ``items[start:]`` into the arrays, then empty those dicts."""
        for lo in range(start, len(items), _STEP):
            self._add(items[lo : lo + _STEP], lo)

    def _add(self, batch: list[Any], start: int) -> None:
        n = len(batch)
        try:
            columns = _columns(batch)
            actions, addrs, sizes, streams, times_raw, frames = columns
            addr = np.frombuffer(array("q", addrs), dtype=np.int64)
            size = np.frombuffer(array("q", sizes), dtype=np.int64)
            stream = np.frombuffer(array("q", streams), dtype=np.int64)
            codes = np.fromiter(map(ACTION_CODES.get, actions, repeat(_OTHER, n)), np.int8, n)
        except (KeyError, TypeError, OverflowError, ValueError):
            raise _bad_batch(batch, start) from None
        if (addr < 0).any() or (size < 0).any() or (stream < 0).any():
            raise _bad_batch(batch, start)
        try:
            times = np.frombuffer(array("q", times_raw), dtype=np.int64)
        except (TypeError, OverflowError):
            times = np.zeros(n, dtype=np.int64)
        if self.has_time and not times.all():
            self.has_time = False
        self._count(actions, codes)
        is_alloc = codes == ALLOC
        site = np.full(n, -1, dtype=np.int32)
        site_of = self._sites.site
        for i in np.flatnonzero(is_alloc).tolist():
            f = frames[i]
            if type(f) is list and f:
                site[i] = site_of(f)
        keep = np.flatnonzero(codes < _FREE_REQUESTED)
        if self.listener is not None:
            self.listener(codes[keep], addr[keep], size[keep], stream[keep])
        self._chunks.append(
            (
                codes[keep],
                addr[keep],
                size[keep],
                stream[keep],
                times[keep],
                keep.astype(np.int64) + start,
                site[keep],
            )
        )
        self.entries = start + n
        # Empty what was copied. The frames lists of segment entries are left alone: torch
        # shares them with the alloc that follows, which may be in the next batch.
        emptied = is_alloc | (codes == FREE) | (codes == _FREE_REQUESTED)
        lists = [f for f in compress(frames, emptied.tolist()) if type(f) is list]
        deque(map(list.clear, lists), maxlen=0)
        deque(map(dict.clear, batch), maxlen=0)

    def _count(self, actions: tuple[Any, ...], codes: npt.NDArray[np.int8]) -> None:
        known = np.bincount(codes, minlength=_OTHER + 1)
        for code, n in enumerate(known[:_OTHER].tolist()):
            if n:
                self.counts[_CODE_NAMES[code]] += n
        if known[_OTHER]:
            for i in np.flatnonzero(codes == _OTHER).tolist():
                self.counts[str(actions[i])] += 1

    def result(self) -> CollectedTrace:
        """The arrays of everything added so far."""
        columns: list[npt.NDArray[Any]] = []
        dtypes = (np.int8, np.int64, np.int64, np.int64, np.int64, np.int64, np.int32)
        for k, dtype in enumerate(dtypes):
            parts = [chunk[k] for chunk in self._chunks]
            columns.append(np.concatenate(parts) if parts else np.zeros(0, dtype=dtype))
        self._chunks = []
        return CollectedTrace(
            action=columns[0],
            addr=columns[1],
            size=columns[2],
            stream=columns[3],
            time_us=columns[4],
            position=columns[5],
            site=columns[6],
            sites=self._sites.names,
            entries=self.entries,
            counts=dict(self.counts),
            has_time=self.has_time and self.entries > 0,
        )
