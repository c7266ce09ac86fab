"""What a replay applies to the emulated allocator: :class:`ReplayOps`, parallel columns of ops.

An op is an allocation or a free of a trace event, an ``empty_cache`` call, or a *setup*
allocation (a block alive before the trace starts: allocated, but not an event). Events are
numbered from 0 in order, leaving out the other two kinds. Columns of plain ints (lists, or
``array('q')`` to hold tens of millions of ops in little memory) are what the replay loop
iterates fastest.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field

from memfit._events import MemoryEvent

__all__ = ["ALLOC", "EMPTY_CACHE", "FREE", "SETUP", "ReplayOps"]

ALLOC, FREE, EMPTY_CACHE, SETUP = 0, 1, 2, 3  # op kinds: an event is an ALLOC or a FREE


@dataclass(frozen=True)
class ReplayOps:
    """The ops to replay, one per position in each column (``block``/``size``/``stream`` of an
    ``EMPTY_CACHE`` or a ``FREE`` are not read).

    ``invalid``: the message of a malformed event that ended the columns (see
    :meth:`from_events`); the replay raises it once the ops before it are done.
    """

    kind: list[int] | array[int]
    block: list[int] | array[int]
    size: list[int] | array[int]
    stream: list[int] | array[int]
    invalid: str | None = None
    num_events: int = field(init=False)  # ALLOC and FREE ops

    def __post_init__(self) -> None:
        n = len(self.kind)
        if not len(self.block) == len(self.size) == len(self.stream) == n:
            raise ValueError("the op columns are not all of the same length")
        object.__setattr__(self, "num_events", self.events_before(n))

    def __len__(self) -> int:
        return len(self.kind)

    def events_before(self, position: int) -> int:
        """How many events come before the op at ``position``."""
        kinds = self.kind[:position]
        return position - kinds.count(EMPTY_CACHE) - kinds.count(SETUP)

    @classmethod
    def from_events(
        cls,
        events: Iterable[MemoryEvent],
        *,
        empty_cache_before: int | Iterable[int] | None = None,
    ) -> ReplayOps:
        """The ops of a trace of events, with an ``empty_cache`` before event
        ``empty_cache_before`` (or before each of several; where there is such an event).

        An event that is malformed whatever happened before it (an unknown kind, a size or
        stream that is not an int >= 0) ends the ops, and its message becomes ``invalid``;
        whether an alloc or free matches the live blocks is for the replay to find.
        """
        kind: list[int] = []
        block: list[int] = []
        size: list[int] = []
        stream: list[int] = []
        invalid = None
        if empty_cache_before is None:
            empties: set[int] = set()
        elif isinstance(empty_cache_before, int):
            empties = {empty_cache_before}
        else:
            empties = set(empty_cache_before)
        for index, event in enumerate(events):
            if index in empties:
                kind.append(EMPTY_CACHE)
                block.append(0)
                size.append(0)
                stream.append(0)
            if event.kind == "alloc":
                invalid = _malformed_alloc(event, index)
                if invalid is not None:
                    break
                kind.append(ALLOC)
                size.append(event.size)
                stream.append(event.stream)
            elif event.kind == "free":
                kind.append(FREE)
                size.append(0)
                stream.append(0)
            else:
                invalid = f"event {index}: kind {event.kind!r} is not 'alloc' or 'free'."
                break
            block.append(event.block)
        return cls(kind, block, size, stream, invalid)


def _malformed_alloc(event: MemoryEvent, index: int) -> str | None:
    """Why an allocation event is malformed whatever came before it; None if it is not."""
    size, stream = event.size, event.stream
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        return f"event {index}: size {size!r} is not a byte count."
    if isinstance(stream, bool) or not isinstance(stream, int) or stream < 0:
        return f"event {index}: stream {stream!r} is not >= 0."
    return None
