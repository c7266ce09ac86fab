"""Read a snapshot pickle without running code from it, in bounded memory.

A pickle is a program: ``pickle.load`` imports and calls whatever the file names, so a
malicious "snapshot" can run ``os.system``. :class:`RestrictedUnpickler` (CPython's C
unpickler) refuses every global and class lookup (``find_class``) and every persistent id, so
only what the pickle opcodes build by themselves comes out: dicts, lists, tuples, strings,
numbers, booleans, ``None`` (and sets and bytes, which a snapshot never holds and the
structure check then rejects). Nothing is imported, nothing is called.

A large snapshot holds millions of trace entries, one small dict each; built all at once they
would take about four times the file's size in memory. So the unpickler reads through
:class:`_DrainingReader`: between two reads of the file it hands the trace entries decoded so
far to a callback (which copies what it needs into arrays) and then empties them. The
unpickler's memo still refers to every entry, but as empty dicts. The entries are found by
looking through the memo for lists of dicts with an ``action`` key, now and then and ever less
often, so the look costs little.
"""

from __future__ import annotations

import gc
import gzip
import pickle
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, cast

from memfit._errors import InvalidInputError

__all__ = ["RestrictedUnpickler", "TraceSink", "read_snapshot_pickle"]

_GZIP_MAGIC = b"\x1f\x8b"
_FIRST_SCAN = 1 << 20  # bytes read before the memo is first searched for trace lists
_IDLE = 4 << 20  # bytes read with no tracked list growing before searching again
_BATCH = 16384  # entries handed to the sink at once while reading

# Drains the new entries ``items[start:]`` of a trace list; returns nothing.
TraceSink = Callable[[list[Any], int], None]


class _Refused(pickle.UnpicklingError):
    """The pickle asked for something a snapshot never contains (a global, a persistent id)."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that builds plain data and refuses every import and persistent id."""

    def find_class(self, module: str, name: str) -> Any:
        raise _Refused(f"the Python object {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("a persistent object (persistent id)")


class _TrackedList:
    __slots__ = ("done", "items", "seen")

    def __init__(self, items: list[Any]) -> None:
        self.items = items
        self.done = 0  # entries handed to the sink
        self.seen = 0  # length at the last look


class _DrainingReader:
    """The file as the unpickler sees it; drains decoded trace entries between reads."""

    def __init__(self, raw: IO[bytes], sink: TraceSink) -> None:
        self._raw = raw
        self._sink = sink
        self.unpickler: RestrictedUnpickler | None = None
        self.tracked: dict[int, _TrackedList] = {}
        self._consumed = 0
        self._next_scan = _FIRST_SCAN
        self._last_growth = 0

    # -- the file interface the C unpickler uses ------------------------------------------

    def read(self, n: int = -1) -> bytes:
        self._between_reads()
        data = self._raw.read(n)
        self._consumed += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        self._between_reads()
        count = self._raw.readinto(buffer)  # type: ignore[attr-defined]
        self._consumed += count or 0
        return int(count or 0)

    def readline(self) -> bytes:
        self._between_reads()
        data = self._raw.readline()
        self._consumed += len(data)
        return data

    def peek(self, n: int = 0) -> bytes:
        return self._raw.peek(n)  # type: ignore[attr-defined, no-any-return]

    # -- draining -------------------------------------------------------------------------

    def drain(self) -> None:
        """Hand every tracked list's new entries to the sink, in batches of at least _BATCH."""
        for tracked in self.tracked.values():
            end = len(tracked.items)
            if end > tracked.seen:
                tracked.seen = end
                self._last_growth = self._consumed
            if end - tracked.done >= _BATCH:
                self._sink(tracked.items, tracked.done)
                tracked.done = end

    def _between_reads(self) -> None:
        if not self.tracked and self._consumed < self._next_scan:
            return
        self.drain()
        idle = not self.tracked or self._consumed - self._last_growth >= _IDLE
        if idle and self._consumed >= self._next_scan:
            found = self._scan()
            self._next_scan = self._consumed + _IDLE if found else 2 * self._consumed

    def _scan(self) -> bool:
        """Look through the unpickler's memo for trace lists not tracked yet."""
        if self.unpickler is None:
            return False
        found = False
        memo = cast("dict[int, Any]", self.unpickler.memo.copy())
        for value in memo.values():
            if (
                type(value) is list
                and value
                and type(value[0]) is dict
                and "action" in value[0]
                and id(value) not in self.tracked
            ):
                self.tracked[id(value)] = _TrackedList(value)
                found = True
        return found


def _open(path: Path) -> IO[bytes]:
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        raise InvalidInputError(
            f"Cannot read the snapshot '{path}': there is no such file. Give the path of a "
            "file saved with torch.cuda.memory._dump_snapshot() (a .pickle, or .pickle.gz)."
        ) from None
    except IsADirectoryError:
        raise InvalidInputError(
            f"Cannot read the snapshot '{path}': it is a folder. Give the path of a .pickle "
            "or .pickle.gz file saved with torch.cuda.memory._dump_snapshot()."
        ) from None
    except OSError as exc:
        raise InvalidInputError(
            f"Cannot read the snapshot '{path}': {exc.strerror or exc}."
        ) from None
    head = handle.peek(2)[:2]
    if head == _GZIP_MAGIC:
        handle.close()
        return cast("IO[bytes]", gzip.open(path, "rb"))
    return handle


def read_snapshot_pickle(path: Path, sink: TraceSink) -> tuple[Any, list[_TrackedList]]:
    """Unpickle ``path`` (plain or gzip) safely; returns the object and the drained lists.

    ``sink`` receives trace entries while the file is read (see the module docstring); the
    returned lists say how far each was drained, so the caller drains the rest.
    """
    raw = _open(path)
    if raw.peek(1) == b"":  # type: ignore[attr-defined]
        raw.close()
        raise InvalidInputError(
            f"Cannot read the snapshot '{path}': the file is empty. Save a snapshot with "
            "torch.cuda.memory._dump_snapshot('snapshot.pickle') after recording with "
            "torch.cuda.memory._record_memory_history()."
        )
    reader = _DrainingReader(raw, sink)
    unpickler = RestrictedUnpickler(reader)  # type: ignore[arg-type]
    reader.unpickler = unpickler
    # The cyclic GC would walk every dict built so far, again and again: loading takes 5x
    # longer with it on. Nothing built here needs it.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        with raw:
            data = unpickler.load()
    except _Refused as exc:
        raise InvalidInputError(
            f"Refused to load '{path}': it asks to load {exc.what}, which a memory snapshot "
            "never contains. A snapshot from torch.cuda.memory._snapshot() holds only dicts, "
            "lists, strings and numbers; this file would run code if loaded with pickle "
            "(it may be malicious), so memfit did not load it and ran nothing from it."
        ) from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise InvalidInputError(
            f"Cannot read the snapshot '{path}': the file is truncated or corrupt "
            f"({str(exc).rstrip('.')}). "
            "Copy it again, or save a new one with torch.cuda.memory._dump_snapshot()."
        ) from None
    except (pickle.UnpicklingError, ValueError, TypeError, IndexError, KeyError) as exc:
        raise InvalidInputError(
            f"Cannot read the snapshot '{path}': it is not a valid pickle "
            f"({str(exc).rstrip('.')}). Expected a "
            "file saved with torch.cuda.memory._dump_snapshot() (a .pickle, or .pickle.gz)."
        ) from None
    except MemoryError:
        raise InvalidInputError(
            f"Cannot read the snapshot '{path}': it does not fit in this machine's memory."
        ) from None
    finally:
        reader.unpickler = None
        if gc_was_enabled:
            gc.enable()
    return data, list(reader.tracked.values())
