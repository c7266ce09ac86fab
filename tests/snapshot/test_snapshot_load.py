"""load(): real snapshots, and every kind of bad file refused with one clear paragraph."""

from __future__ import annotations

import copyreg
import gzip
import os
import pickle
import pickletools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from snapshot_data import SOME_TRACES, STACKS, fragmenting_events, raw_trace

import memfit.snapshot as ms
from memfit._errors import InvalidInputError
from memfit.snapshot._collect import ALLOC, FREE


class _Payload:
    """Pickles to a call of ``func(*args)``: what a malicious snapshot would do."""

    def __init__(self, func: Callable[..., Any], *args: Any) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.func, self.args)


def _marker_code(marker: Path) -> str:
    return f"open({str(marker)!r}, 'w').write('pwned')"


def _snapshot_with(payload: Any) -> dict[str, Any]:
    """A valid-looking snapshot with the payload deep inside its trace."""
    entries = [{"action": "alloc", "addr": 4096 * i, "size": 512, "stream": 0} for i in range(50)]
    entries[30]["frames"] = [payload]
    return {"segments": [], "device_traces": [entries]}


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_a_pickle_that_runs_code_is_refused_and_runs_nothing(tmp_path: Path, protocol: int) -> None:
    # the payload works: plain pickle would run it
    probe = tmp_path / "probe"
    pickle.loads(pickle.dumps(_Payload(exec, _marker_code(probe)), protocol=protocol))
    assert probe.exists()

    marker = tmp_path / "marker"
    path = tmp_path / "evil.pickle"
    path.write_bytes(pickle.dumps(_snapshot_with(_Payload(exec, _marker_code(marker))), protocol))
    with pytest.raises(
        InvalidInputError, match=r"Refused to load .*evil\.pickle.*(__builtin__|builtins)\.exec"
    ):
        ms.load(path)
    assert not marker.exists()


def test_os_system_in_a_gzipped_pickle_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    path = tmp_path / "evil.pickle.gz"
    with gzip.open(path, "wb") as fh:
        pickle.dump(_Payload(os.system, f"touch {marker}"), fh)
    with pytest.raises(
        InvalidInputError, match=r"evil\.pickle\.gz.*(posix|nt)\.system.*ran nothing"
    ):
        ms.load(path)
    assert not marker.exists()


def test_a_payload_after_many_entries_is_refused_too(tmp_path: Path) -> None:
    """Refused even when it comes after the loader started draining trace entries."""
    marker = tmp_path / "marker"
    entries: list[Any] = [
        {"action": "alloc", "addr": 4096 * i, "size": 512, "stream": 0, "time_us": 1 + i}
        for i in range(120_000)
    ]
    entries.append(_Payload(exec, _marker_code(marker)))
    path = tmp_path / "late.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [entries]}))
    assert path.stat().st_size > 2 << 20
    with pytest.raises(InvalidInputError, match="Refused to load"):
        ms.load(path)
    assert not marker.exists()


def test_extension_codes_and_persistent_ids_are_refused(tmp_path: Path) -> None:
    copyreg.add_extension("os", "system", 0x7E)
    try:
        path = tmp_path / "ext.pickle"
        path.write_bytes(b"\x80\x02\x82\x7e.")  # PROTO 2, EXT1 0x7e, STOP
        with pytest.raises(InvalidInputError, match=r"Refused .*os\.system"):
            ms.load(path)
    finally:
        copyreg.remove_extension("os", "system", 0x7E)
    path = tmp_path / "pid.pickle"
    path.write_bytes(b"\x80\x02K\x01Q.")  # PROTO 2, BININT1 1, BINPERSID, STOP
    with pytest.raises(InvalidInputError, match="persistent"):
        ms.load(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "the file is empty"),
        (b"# not a pickle\n", "not a valid pickle"),
        (pickle.dumps([1, 2, 3]), "not a PyTorch memory snapshot.*found a list of 3 items"),
        (pickle.dumps({"segments": []}), "expected a dict with 'segments' and 'device_traces'"),
        (pickle.dumps({"segments": [], "device_traces": [{}]}), "not a list of lists"),
        (
            pickle.dumps({"segments": [], "device_traces": [[{"action": "alloc"}]]}),
            "entry 0 .* no 'addr'",
        ),
        (
            pickle.dumps(
                {
                    "segments": [],
                    "device_traces": [[{"action": "alloc", "addr": 1.5, "size": 1, "stream": 0}]],
                }
            ),
            "'addr' 1.5, not a byte count",
        ),
        (
            pickle.dumps({"segments": [{"address": 1}], "device_traces": [[]]}),
            r"segments\[0\] has no 'total_size'",
        ),
    ],
)
def test_bad_files_get_one_clear_error_naming_the_file(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "bad.pickle"
    path.write_bytes(content)
    with pytest.raises(InvalidInputError, match=message) as info:
        ms.load(path)
    assert str(path) in str(info.value)


def test_truncated_files(tmp_path: Path) -> None:
    data = gzip.decompress(SOME_TRACES[4].read_bytes())
    for name, content in [
        ("cut.pickle", data[: len(data) // 2]),
        ("cut.pickle.gz", gzip.compress(data)[:-200]),
    ]:
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(InvalidInputError, match=r"truncated or corrupt|not a valid pickle"):
            ms.load(path)


def test_missing_file_and_folder(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="no such file"):
        ms.load(tmp_path / "nope.pickle")
    with pytest.raises(InvalidInputError, match="it is a folder"):
        ms.load(tmp_path)


@pytest.mark.parametrize("path", SOME_TRACES, ids=lambda p: p.name)
def test_real_snapshots_load_exactly(path: Path) -> None:
    snap = ms.load(path)
    raw = raw_trace(path)
    entries = raw["device_traces"][0]
    kept = [e for e in entries if e["action"] not in ("free_requested",)]
    assert snap.num_entries == len(entries)
    assert snap.trace.addr.tolist() == [e["addr"] for e in kept]
    assert snap.trace.size.tolist() == [e["size"] for e in kept]
    assert snap.trace.time_us.tolist() == [e["time_us"] for e in kept]
    assert snap.trace.counts["alloc"] == sum(e["action"] == "alloc" for e in entries)
    assert len(snap.segments) == len(raw["segments"])
    assert sum(s.total_size for s in snap.segments) == sum(s["total_size"] for s in raw["segments"])
    assert snap.config.expandable_segments == raw["allocator_settings"]["expandable_segments"]
    events = snap.events()
    assert [e.kind for e in events] == [
        "alloc" if e["action"] == "alloc" else "free"
        for e in entries
        if e["action"] in ("alloc", "free_completed")
    ]


def test_plain_and_gzipped_files_read_the_same(tmp_path: Path) -> None:
    plain = tmp_path / "plain.pickle"
    plain.write_bytes(gzip.decompress(SOME_TRACES[0].read_bytes()))
    a, b = ms.load(plain), ms.load(SOME_TRACES[0])
    assert np.array_equal(a.trace.addr, b.trace.addr) and a.num_entries == b.num_entries


def test_a_large_trace_is_drained_while_loading_and_still_exact(write_snapshot: Any) -> None:
    """Enough entries that the loader empties them as it reads: the arrays must still match."""
    path = write_snapshot(fragmenting_events(60_000), stacks=STACKS, free_frames=True)
    assert path.stat().st_size > 2 << 20
    data = pickle.loads(path.read_bytes())
    entries = data["device_traces"][0]
    snap = ms.load(path)
    kept = [e for e in entries if e["action"] != "free_requested"]
    assert snap.trace.addr.tolist() == [e["addr"] for e in kept]
    assert snap.trace.position.tolist() == [
        i for i, e in enumerate(entries) if e["action"] != "free_requested"
    ]
    allocs = np.flatnonzero(snap.trace.action == ALLOC)
    expected = [
        1 if e["frames"][1]["name"] == "MLP.forward" else 0
        for e in entries
        if e["action"] == "alloc"
    ]
    names = [snap.trace.sites[s] for s in snap.trace.site[allocs].tolist()]
    assert [int(n.endswith("MLP.forward")) for n in names] == expected
    assert (snap.trace.action == FREE).sum() == sum(
        e["action"] == "free_completed" for e in entries
    )


def test_the_busiest_device_is_chosen(tmp_path: Path) -> None:
    raw = raw_trace(SOME_TRACES[4])
    raw["device_traces"] = [[], raw["device_traces"][0]]
    for seg in raw["segments"]:
        seg["device"] = 1
    path = tmp_path / "two.pickle"
    path.write_bytes(pickle.dumps(raw))
    snap = ms.load(path)
    assert (snap.device, snap.devices_with_trace, len(snap.segments)) == (
        1,
        (1,),
        len(raw["segments"]),
    )
    empty = ms.load(path, device=0)
    assert empty.num_entries == 0 and not empty.segments
    with pytest.raises(InvalidInputError, match="device 5"):
        ms.load(path, device=5)


def test_the_restricted_unpickler_builds_only_plain_data() -> None:
    """Sanity check of the test pickles: a snapshot's opcodes never name a global."""
    data = gzip.decompress(SOME_TRACES[4].read_bytes())
    assert not any(
        op.name in ("GLOBAL", "STACK_GLOBAL", "REDUCE") for op, _, _ in pickletools.genops(data)
    )


def test_oom_entries_without_an_address_load(tmp_path):
    """torch records an ``oom`` entry with ``device_free`` and no ``addr``."""
    import pickle

    from memfit import snapshot

    entries = [
        {"action": "alloc", "addr": 4096, "size": 512, "stream": 0, "time_us": 1},
        {"action": "oom", "device_free": 1 << 20, "size": 1 << 30, "stream": 0, "time_us": 2},
    ]
    path = tmp_path / "oom.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [entries]}))
    assert snapshot.load(path) is not None
