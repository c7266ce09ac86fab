"""report(): peaks against a direct count of the trace, the replay check, what-ifs."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from snapshot_data import ALL_TRACES, SOME_TRACES, STACKS, TRACES, fragmenting_events, raw_trace

import memfit.snapshot as ms
from memfit._events import MemoryEvent
from memfit.snapshot import _parallel, _stream, _what_if_runs

MiB = 1 << 20
GiB = 1 << 30


def recount(entries: list[dict[str, Any]]) -> tuple[int, int]:
    """Peak live requested bytes and peak reserved bytes, counted entry by entry."""
    live: dict[int, int] = {}
    requested = reserved = peak_requested = peak_reserved = 0
    for e in entries:
        action = e["action"]
        if action == "alloc":
            live[e["addr"]] = e["size"]
            requested += e["size"]
        elif action == "free_completed":
            requested -= live.pop(e["addr"])
        elif action in ("segment_alloc", "segment_map"):
            reserved += e["size"]
        elif action in ("segment_free", "segment_unmap"):
            reserved -= e["size"]
        peak_requested = max(peak_requested, requested)
        peak_reserved = max(peak_reserved, reserved)
    return peak_requested, peak_reserved


@pytest.mark.parametrize("path", SOME_TRACES, ids=lambda p: p.name)
def test_peaks_equal_a_direct_count_of_the_trace(path: Path) -> None:
    rep = ms.report(path, what_if=False)
    peak_requested, peak_reserved = recount(raw_trace(path)["device_traces"][0])
    assert (rep.peak_requested, rep.peak_reserved) == (peak_requested, peak_reserved)
    assert rep.requested.max() == peak_requested and rep.reserved.max() == peak_reserved
    assert rep.reserved[rep.peak_reserved_event] == peak_reserved
    assert rep.complete and rep.initial_requested == rep.initial_reserved == 0


@pytest.mark.parametrize("path", ALL_TRACES, ids=lambda p: p.name.removeprefix("trace-"))
def test_the_recorded_settings_replay_reproduces_reserved_exactly(path: Path) -> None:
    rep = ms.report(path, what_if=False)
    assert rep.replay.exact, rep.replay.message
    assert rep.replay.emulated_peak_reserved == rep.replay.recorded_peak_reserved
    assert rep.replay.message.startswith("emulator reproduces the recorded peak reserved exactly")
    assert rep.peak_allocated >= rep.peak_requested


def test_peak_allocated_equals_what_torch_measured() -> None:
    """max_memory_allocated() / max_memory_reserved() measured on the H200 for these runs."""
    measured = {}
    for part in TRACES.parent.glob("measured-part*.json"):
        for row in json.loads(part.read_text())["rows"]:
            if row.get("trace_file"):
                measured[row["trace_file"]] = row
    for name in (
        "bert-base-fp32-b32-s512",
        "tinyllama-bf16-b4-s2048-expandable",
        "t5-small-fp32-b32-s512",
    ):
        rep = ms.report(TRACES / f"trace-{name}.pickle.gz", what_if=False)
        row = measured[f"trace-{name}.pickle.gz"]
        assert (rep.peak_allocated, rep.peak_reserved) == (
            row["peak_allocated"],
            row["peak_reserved"],
        )


def test_largest_blocks_and_fragmentation_at_the_peak() -> None:
    rep = ms.report(SOME_TRACES[0], what_if=False, top=5)
    assert len(rep.top_blocks) == 5
    sizes = [b.size for b in rep.top_blocks]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > GiB
    assert rep.frames_note is not None and "stacks='python'" in rep.frames_note
    k = rep.peak_reserved_event
    assert rep.fragmentation_at_peak == rep.reserved[k] - rep.allocated[k] >= 0
    assert rep.largest_free_at_peak is not None
    assert 0 < rep.largest_free_at_peak <= rep.fragmentation_at_peak
    assert sum(s.total_size for s in rep.segments_at_peak) == rep.reserved[k]
    assert rep.phases and {p.kind for p in rep.phases} == {"optimizer", "zero_grad"}


def test_top_sites_group_by_the_first_frame_outside_torch(write_snapshot: Any) -> None:
    rep = ms.report(write_snapshot(stacks=STACKS), what_if=False)
    assert rep.frames_note is None
    assert {s.site for s in rep.top_sites} == {
        "/home/u/model.py:42 Attention.forward",
        "/home/u/model.py:77 MLP.forward",
    }
    assert sum(s.size for s in rep.top_sites) == rep.requested[rep.peak_allocated_event]


def test_a_wrapped_trace_counts_what_was_alive_before_it(write_snapshot: Any) -> None:
    events = fragmenting_events(3000)
    full = ms.report(write_snapshot(events, name="full.pickle"), what_if=False)
    wrapped = ms.report(write_snapshot(events, name="wrapped.pickle", max_entries=2500))
    assert not wrapped.complete
    assert wrapped.initial_requested > 0 and wrapped.initial_reserved > 0
    # the memory at the end is the same whichever part of the trace was kept
    assert wrapped.requested[-1] == full.requested[-1]
    assert wrapped.reserved[-1] == full.reserved[-1]
    assert "does not start empty" in wrapped.replay.message
    assert wrapped.what_if  # still replays, from a guessed start


def test_expandable_segments_beat_the_default_on_a_fragmenting_trace(write_snapshot: Any) -> None:
    rep = ms.report(write_snapshot(fragmenting_events(4000)))
    rows = {w.label: w for w in rep.what_if}
    assert rows["default"].recorded
    expandable = rows["expandable_segments:True"]
    assert expandable.peak_reserved is not None
    assert expandable.peak_reserved <= rows["default"].peak_reserved
    assert expandable.saved == rep.replay.emulated_peak_reserved - expandable.peak_reserved
    assert set(rows) == {
        "default",
        "expandable_segments:True",
        "max_split_size_mb:128",
        "max_split_size_mb:512",
        "garbage_collection_threshold:0.8",
    }
    assert rep.recommendation.startswith("Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")


def test_an_expandable_recording_is_compared_with_the_default(write_snapshot: Any) -> None:
    rep = ms.report(write_snapshot(config="expandable_segments:True"))
    labels = [w.label for w in rep.what_if]
    assert labels[0] == "expandable_segments:True" and "default" in labels
    assert rep.replay.exact


def test_a_capacity_makes_settings_that_do_not_fit_say_so(write_snapshot: Any) -> None:
    path = write_snapshot(fragmenting_events(4000))
    base = ms.report(path)
    rep = ms.report(path, capacity=base.peak_reserved - 300 * MiB)
    rows = {w.label: w for w in rep.what_if}
    assert any(w.outcome and "out of memory" in w.outcome for w in rep.what_if)
    assert rows["expandable_segments:True"].peak_reserved is not None
    assert "given capacity" in (rows["garbage_collection_threshold:0.8"].note or "")


def test_workers_give_the_same_answers(
    write_snapshot: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_snapshot(fragmenting_events(2000))
    serial = ms.report(path).what_if
    monkeypatch.setattr(_parallel, "PARALLEL_MIN_EVENTS", 0)
    monkeypatch.setattr(_parallel, "cpu_count", lambda: 3)
    assert ms.report(path).what_if == serial


@pytest.mark.parametrize(("wrapped", "capacity"), [(False, None), (True, None), (False, 2 * GiB)])
def test_what_ifs_replayed_while_reading_give_the_same_answers(
    write_snapshot: Any, monkeypatch: pytest.MonkeyPatch, wrapped: bool, capacity: int | None
) -> None:
    """A trace that does not start empty is replayed again after reading (the stream lacks it)."""
    kwargs = {"max_entries": 4000} if wrapped else {}
    path = write_snapshot(fragmenting_events(3000), **kwargs)
    expected = ms.report(ms.load(path), capacity=capacity).what_if
    if capacity is not None:
        assert any(w.outcome and "out of memory at event" in w.outcome for w in expected)
    monkeypatch.setattr(_what_if_runs, "STREAM_MIN_BYTES", 0)
    monkeypatch.setattr(_what_if_runs, "cpu_count", lambda: 2)
    started: list[Any] = []
    real_start = _what_if_runs.start_streaming

    def spy(*args: Any) -> Any:
        started.append(real_start(*args))
        return started[-1]

    monkeypatch.setattr("memfit.snapshot._report.start_streaming", spy)
    streamed: list[Any] = []
    real_results = _stream.StreamingReplays.results

    def results(self: Any) -> Any:
        streamed.append(real_results(self))
        assert self.completed  # the worker did not die
        return streamed[-1]

    monkeypatch.setattr(_stream.StreamingReplays, "results", results)
    assert ms.report(path, capacity=capacity).what_if == expected
    assert started and started[0] is not None
    if wrapped:  # dropped, and replayed after reading
        assert streamed == []
    else:
        assert len(streamed) == 1
        replayed, extra = streamed[0]
        assert len(replayed) == 3 and all(r.error is None for r in replayed)
        assert set(extra) <= {0}  # the garbage-collection job: the worker's or this process's


def test_an_empty_trace_reports_without_failing(tmp_path: Path) -> None:
    path = tmp_path / "empty.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [[]]}))
    rep = ms.report(path)
    assert (rep.events, rep.peak_allocated, rep.peak_reserved) == (0, 0, 0)
    assert rep.top_blocks == ()


def test_zero_byte_and_tiny_traces(write_snapshot: Any) -> None:
    events = [
        MemoryEvent("alloc", 1, 100),
        MemoryEvent("alloc", 2, 3 * MiB),
        MemoryEvent("free", 1, 0),
    ]
    rep = ms.report(write_snapshot(events))
    assert (rep.peak_requested, rep.peak_allocated, rep.peak_reserved) == (
        100 + 3 * MiB,
        512 + 3 * MiB,
        22 * MiB,
    )


DATA = Path(__file__).parent / "data"
GPU_STATS = json.loads((DATA / "stats.json").read_text())["cases"]


@pytest.mark.parametrize("name", ["python", "all"])
def test_real_snapshots_with_stack_frames(name: str) -> None:
    """Recorded by record_on_gpu.py on an H200: stacks='python', and stacks='all' (C++ frames)
    with expandable segments. Recording started after the model was built."""
    rep = ms.report(DATA / f"{name}.pickle.gz")
    stats = GPU_STATS[name]
    assert (rep.peak_allocated, rep.peak_reserved) == (
        stats["max_memory_allocated"],
        stats["max_memory_reserved"],
    )
    assert not rep.complete and rep.initial_requested > 0
    assert rep.replay.emulated_peak_reserved == rep.replay.recorded_peak_reserved
    sites = {s.site for s in rep.top_sites}
    assert any(s.endswith("record_on_gpu.py:47 run_case") for s in sites)
    assert "(allocated before the trace)" in sites
    assert rep.frames_note is None
    if name == "all":  # the autograd engine's thread has C++ frames only
        assert "(backward) AddmmBackward0" in sites
    else:
        assert "(no Python frames: the autograd engine or another thread)" in sites


def test_a_real_trace_cut_like_a_wrapped_ring_buffer(tmp_path: Path) -> None:
    """torch's ring buffer keeps the newest max_entries entries: cutting the front is the same."""
    import gzip

    raw = pickle.loads(gzip.decompress((DATA / "python.pickle.gz").read_bytes()))
    full = ms.report(DATA / "python.pickle.gz", what_if=False)
    raw["device_traces"][0] = raw["device_traces"][0][-150:]
    path = tmp_path / "wrapped.pickle"
    path.write_bytes(pickle.dumps(raw))
    rep = ms.report(path)
    assert rep.entries == 150 and not rep.complete
    assert rep.requested[-1] == full.requested[-1] and rep.reserved[-1] == full.reserved[-1]
    assert rep.peak_reserved <= full.peak_reserved
    assert rep.what_if


def test_the_expandable_what_if_predicts_the_real_expandable_run() -> None:
    """TinyLlama was recorded twice on the H200: default settings and expandable segments.
    The what-if on the first gives the second's peaks to the byte."""
    default = ms.report(TRACES / "trace-tinyllama-bf16-b4-s2048.pickle.gz")
    real = ms.report(TRACES / "trace-tinyllama-bf16-b4-s2048-expandable.pickle.gz", what_if=False)
    row = next(w for w in default.what_if if w.label == "expandable_segments:True")
    assert (row.peak_reserved, row.peak_allocated) == (real.peak_reserved, real.peak_allocated)


def test_repr_is_one_short_line(write_snapshot) -> None:
    report = ms.report(ms.load(write_snapshot()))
    text = repr(report)
    assert "\n" not in text and len(text) < 300
    assert f"peak reserved {report.peak_reserved} B" in text
