"""A loaded memory snapshot: :class:`Snapshot`, and :func:`load`, which reads one safely.

``torch.cuda.memory._snapshot()`` (saved by ``torch.cuda.memory._dump_snapshot``) is a dict::

    {"segments": [...],          # the allocator's segments and blocks when it was taken
     "device_traces": [[...]],   # per device: every allocator action recorded since
                                 # _record_memory_history() (a ring buffer: may have wrapped)
     "allocator_settings": {...},       # torch >= 2.5
     "external_annotations": [...]}     # torch >= 2.6 (optimizer step and zero_grad spans)

:func:`load` keeps one device: its trace as arrays (see ``_collect``), its end-state segments
as :class:`~memfit.allocator.SegmentInfo`, the allocator settings it ran with as an
:class:`~memfit.allocator.AllocatorConfig`, and the annotations.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from memfit._errors import InvalidInputError
from memfit._events import MemoryEvent
from memfit.allocator import AllocatorConfig, BlockInfo, SegmentInfo
from memfit.snapshot._collect import (
    ALLOC,
    FREE,
    BadEntry,
    CollectedTrace,
    Listener,
    TraceCollector,
)
from memfit.snapshot._settings import recorded_config
from memfit.snapshot._sites import SiteIndex
from memfit.snapshot._unpickle import read_snapshot_pickle

__all__ = ["Annotation", "Snapshot", "load", "read"]

_HOW_TO_RECORD = (
    "Record one with torch.cuda.memory._record_memory_history() before the code you want to "
    "see, then save it with torch.cuda.memory._dump_snapshot('snapshot.pickle')."
)


@dataclass(frozen=True, slots=True)
class Annotation:
    """A span torch marks in the trace (``external_annotations``), e.g. an optimizer step."""

    name: str
    stage: str  # "START" or "END"
    time_us: int


@dataclass(frozen=True)
class Snapshot:
    """One device's recorded allocator trace and end state, from a snapshot file.

    ``trace`` holds the entries the analysis needs as arrays (``alloc``, ``free_completed``,
    ``segment_*``, ``oom``); ``segments`` is the allocator's state when the snapshot was taken.
    ``config`` is the allocator settings the process ran with (torch's defaults when the file
    does not say, and ``config_note`` says so).
    """

    path: Path | None
    device: int
    devices_with_trace: tuple[int, ...]
    trace: CollectedTrace = field(repr=False)
    segments: tuple[SegmentInfo, ...] = field(repr=False)
    config: AllocatorConfig
    config_note: str | None
    annotations: tuple[Annotation, ...] = field(repr=False)
    # sites of end-state blocks that still carry frames: those allocated before the trace
    block_sites: dict[int, str] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        """The file name, for titles."""
        return self.path.name if self.path is not None else "snapshot"

    @property
    def num_entries(self) -> int:
        """Trace entries of this device, every action included."""
        return self.trace.entries

    def events(self) -> list[MemoryEvent]:
        """The trace's allocations and frees as memory events (``block`` is the address).

        A free whose allocation is not in the trace (the ring buffer wrapped, or recording
        started late) is included as it is; :func:`memfit.allocator.replay` rejects such a
        trace, :func:`memfit.snapshot.report` handles it.
        """
        t = self.trace
        out = []
        for code, addr, size, stream in zip(
            t.action.tolist(), t.addr.tolist(), t.size.tolist(), t.stream.tolist(), strict=True
        ):
            if code == ALLOC:
                out.append(MemoryEvent("alloc", addr, size, stream))
            elif code == FREE:
                out.append(MemoryEvent("free", addr, size, stream))
        return out


def _not_a_snapshot(path: Path, found: str) -> InvalidInputError:
    return InvalidInputError(
        f"'{path}' is a pickle but not a PyTorch memory snapshot: expected a dict with "
        f"'segments' and 'device_traces' (what torch.cuda.memory._snapshot() returns), but "
        f"found {found}. {_HOW_TO_RECORD}"
    )


def _describe(data: Any) -> str:
    if isinstance(data, dict):
        keys = ", ".join(repr(k) for k in list(data)[:6])
        return f"a dict with the keys {keys or 'none'}"
    if isinstance(data, list):
        return (
            f"a list of {len(data)} items (torch.cuda.memory_snapshot() returns only the "
            "segments, without the trace)"
        )
    return f"a {type(data).__name__}"


def _block_sites(segments: list[Any], device: int) -> dict[int, str]:
    """Where the allocated end-state blocks that still have frames were allocated.

    The frames of blocks allocated during the trace were emptied while loading (torch shares
    them with the ``alloc`` entries); what is left are blocks allocated before the trace.
    """
    index = SiteIndex()
    out = {}
    for seg in segments:
        if not isinstance(seg, dict) or seg.get("device", device) != device:
            continue
        for block in seg.get("blocks") or ():
            frames = block.get("frames") if isinstance(block, dict) else None
            if type(frames) is list and frames and str(block.get("state", "")).startswith("active"):
                out[block.get("address")] = index.names[index.site(frames)]
    return out


def _segment(path: Path, index: int, raw: Any) -> SegmentInfo:
    def bad(problem: str) -> InvalidInputError:
        return InvalidInputError(
            f"'{path}': segments[{index}] {problem}; expected a dict with 'address', "
            "'total_size', 'stream' and 'blocks' (each with 'address', 'size', 'state') as "
            "torch.cuda.memory._snapshot() writes it."
        )

    if not isinstance(raw, dict):
        raise bad(f"is a {type(raw).__name__}")
    for key in ("address", "total_size", "stream", "blocks"):
        if key not in raw:
            raise bad(f"has no '{key}'")
    if not isinstance(raw["blocks"], list):
        raise bad("has 'blocks' that is not a list")
    blocks = []
    for b in raw["blocks"]:
        if not isinstance(b, dict) or not all(k in b for k in ("address", "size", "state")):
            raise bad("has a block without 'address', 'size' and 'state'")
        state = str(b["state"])
        blocks.append(
            BlockInfo(
                address=_int(b["address"], bad),
                size=_int(b["size"], bad),
                requested_size=_int(b.get("requested_size", b["size"]), bad),
                allocated=state.startswith("active"),
            )
        )
    total = _int(raw["total_size"], bad)
    kind = raw.get("segment_type")
    small = kind == "small" if kind in ("small", "large") else total <= 2 << 20
    pool: Literal["small", "large"] = "small" if small else "large"
    return SegmentInfo(
        address=_int(raw["address"], bad),
        total_size=total,
        stream=_int(raw["stream"], bad),
        pool=pool,
        is_expandable=bool(raw.get("is_expandable", False)),
        blocks=tuple(blocks),
    )


def _int(value: Any, bad: Any) -> int:
    if type(value) is not int or value < 0:
        raise bad(f"has the value {value!r} where a byte count belongs")
    return value


def _annotations(raw: Any, device: int) -> tuple[Annotation, ...]:
    if not isinstance(raw, list):
        return ()
    out = []
    for item in raw:
        if (
            isinstance(item, dict)
            and item.get("device", device) == device
            and isinstance(item.get("name"), str)
            and item.get("stage") in ("START", "END")
            and type(item.get("time_us")) is int
        ):
            out.append(Annotation(item["name"], item["stage"], item["time_us"]))
    return tuple(out)


def load(path: str | os.PathLike[str], *, device: int | None = None) -> Snapshot:
    """Read a snapshot saved by ``torch.cuda.memory._dump_snapshot`` (``.pickle`` or gzipped).

    The file is unpickled without importing or calling anything it names: a file that asks
    for any Python object (as a malicious pickle does) is refused with
    :class:`~memfit.InvalidInputError`, as are empty, truncated and non-snapshot files.
    ``device`` picks the GPU whose trace to keep; by default, the one with the most entries.
    Memory stays near the size of the file even for millions of trace entries.
    """
    return read(path, device=device)[0]


def read(
    path: str | os.PathLike[str], *, device: int | None = None, listener: Listener | None = None
) -> tuple[Snapshot, bool]:
    """:func:`load`, handing ``listener`` the batches of the first trace list read.

    Also returns whether that list is the chosen device's, so the listener saw all of it.
    """
    source = Path(path).expanduser()
    collectors: dict[int, TraceCollector] = {}

    def sink(items: list[Any], start: int) -> None:
        collector = collectors.get(id(items))
        if collector is None:
            collector = TraceCollector(listener if not collectors else None)
            collectors[id(items)] = collector
        collector.add(items, start)

    try:
        data, drained = read_snapshot_pickle(source, sink)
    except BadEntry as exc:
        raise _bad_entry(source, None, exc) from None
    if not isinstance(data, dict) or "segments" not in data or "device_traces" not in data:
        raise _not_a_snapshot(source, _describe(data))
    traces, segments = data["device_traces"], data["segments"]
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise _not_a_snapshot(source, "'device_traces' that is not a list of lists")
    if not isinstance(segments, list):
        raise _not_a_snapshot(source, "'segments' that is not a list")
    done = {id(t.items): t.done for t in drained}
    lengths = [len(t) for t in traces]
    with_trace = tuple(d for d, n in enumerate(lengths) if n)
    if device is None:
        device = max(range(len(traces)), key=lambda d: lengths[d], default=0)
    elif not 0 <= device < max(len(traces), 1):
        raise InvalidInputError(
            f"'{source}' has traces for devices 0 to {len(traces) - 1}; device {device} is "
            "not among them."
        )
    chosen = traces[device] if traces else []
    collector = collectors.get(id(chosen)) or TraceCollector(None if collectors else listener)
    try:
        collector.add(chosen, done.get(id(chosen), 0))
    except BadEntry as exc:
        raise _bad_entry(source, device, exc) from None
    config, note = recorded_config(data.get("allocator_settings"), source)
    streamed = collector.listener is not None
    snapshot = Snapshot(
        path=source,
        device=device,
        devices_with_trace=with_trace,
        trace=collector.result(),
        segments=tuple(
            _segment(source, i, s)
            for i, s in enumerate(segments)
            if not isinstance(s, dict) or s.get("device", device) == device
        ),
        config=config,
        config_note=note,
        annotations=_annotations(data.get("external_annotations"), device),
        block_sites=_block_sites(segments, device),
    )
    return snapshot, streamed


def _bad_entry(path: Path, device: int | None, exc: BadEntry) -> InvalidInputError:
    where = f"device_traces[{device}]" if device is not None else "device_traces"
    return InvalidInputError(
        f"'{path}': entry {exc.index} of {where} {exc.problem}; expected a dict with "
        "'action', 'addr', 'size' and 'stream' (byte counts as integers), as "
        "torch.cuda.memory._snapshot() writes it."
    )
