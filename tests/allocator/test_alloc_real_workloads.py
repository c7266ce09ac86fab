"""The emulator replays the allocator traces of 37 real workloads recorded on an H200
(torch 2.11; benchmarks/results/2026-11-30-h200-estimate-accuracy/traces) and must reproduce,
to the byte, every segment the GPU created or released and the peak reserved that torch
reported."""

from __future__ import annotations

import gzip
import io
import json
import pickle
import tarfile
from pathlib import Path
from typing import Any

import pytest

from memfit.allocator import CachingAllocator, ScriptedAddressSpace, segment_bases_from_trace

RESULTS = Path(__file__).parents[2] / "benchmarks" / "results" / "2026-11-30-h200-estimate-accuracy"
TRACES = sorted((RESULTS / "traces").glob("trace-*.pickle.gz"))
H200_TOTAL = 143771 * 2**20
SEGMENT_ACTIONS = ("segment_alloc", "segment_free", "segment_map", "segment_unmap")


def _measured() -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for path in RESULTS.glob("measured-part*.json"):
        for row in json.loads(path.read_text())["rows"]:
            if "error" not in row:
                rows[row["id"]] = row
    return rows


MEASURED = _measured()


def _workload_id(path: Path) -> str:
    return path.name.removeprefix("trace-").removesuffix(".pickle.gz")


def _load(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rb") as fh:
        trace: list[dict[str, Any]] = pickle.load(fh)["device_traces"][0]  # gpu_measure.py's
    return trace


def _replay_peak(trace: list[dict[str, Any]], alloc: CachingAllocator) -> int:
    """Peak reserved after the model is built (gpu_measure.py empties the cache then)."""
    after_build, overall, previous = None, 0, ""
    for e in trace:
        action = e["action"]
        if action == "alloc":
            alloc.malloc(e["addr"], e["size"], e["stream"])
        elif action == "free_completed":
            alloc.free(e["addr"])
        elif action in ("segment_free", "segment_unmap") and previous not in (
            "segment_free",
            "segment_unmap",
        ):
            alloc.empty_cache()
            after_build = alloc.reserved
        if after_build is not None:
            after_build = max(after_build, alloc.reserved)
        overall = max(overall, alloc.reserved)
        previous = action
    return after_build if after_build is not None else overall


def test_the_default_address_model_is_close_on_every_workload() -> None:
    """Without the real segment addresses (as in an estimate), the top-down address model gives
    the real peak reserved on 33 of the 37 traces and comes within 0.7% on all (the chunked
    model it replaced: 30, within 1.1%)."""
    exact, worst = 0, 0.0
    for path in TRACES:
        row = MEASURED[_workload_id(path)]
        alloc = CachingAllocator(row["allocator_config"], device_total=H200_TOTAL)
        peak = _replay_peak(_load(path), alloc)
        exact += peak == row["peak_reserved"]
        worst = max(worst, abs(peak - row["peak_reserved"]) / row["peak_reserved"])
    assert exact >= 33 and worst < 0.007


HELD_OUT = Path(__file__).parents[2] / "benchmarks" / "results" / "2026-12-01-h200-heldout-families"


def test_the_default_address_model_on_held_out_traces() -> None:
    """The 10 traces of the held-out families (benchmarks/results/2026-12-01-h200-heldout-families;
    not among the 37 above; like them, read to find the rules):
    among them the TinyLlama seq 8192 one that the chunked model missed by a 500 MiB segment
    (-3.5%). Without the real addresses, all but one give the real peak reserved, and that one
    is 0.3% over."""
    rows = {
        r["id"]: r for r in json.loads((HELD_OUT / "heldout" / "measured.json").read_text())["rows"]
    }
    off: dict[str, float] = {}
    with tarfile.open(HELD_OUT / "heldout" / "traces.tar.gz") as tar:
        for member in tar.getmembers():
            fh = tar.extractfile(member)
            if fh is None or not member.name.endswith(".pickle.gz"):
                continue
            row = rows[Path(member.name).name.removeprefix("trace-").removesuffix(".pickle.gz")]
            with gzip.open(io.BytesIO(fh.read()), "rb") as inner:
                trace: list[dict[str, Any]] = pickle.load(inner)["device_traces"][0]
            alloc = CachingAllocator(row["allocator_config"], device_total=H200_TOTAL)
            peak = _replay_peak(trace, alloc)
            off[row["id"]] = (peak - row["peak_reserved"]) / row["peak_reserved"]
    assert len(off) == 10
    assert off["tinyllama-bf16-b1-s8192-ckpt"] == 0.0
    assert sum(v == 0.0 for v in off.values()) >= 8 and all(0 <= v < 0.004 for v in off.values())


@pytest.mark.parametrize("path", TRACES, ids=_workload_id)
def test_replay_reproduces_the_gpu(path: Path) -> None:
    row = MEASURED[_workload_id(path)]
    trace = _load(path)
    entries = [[e["action"], e["addr"], e["size"]] for e in trace]
    bases = segment_bases_from_trace(entries, device_total=H200_TOTAL)
    alloc = CachingAllocator(
        row["allocator_config"], device_total=H200_TOTAL, address_space=ScriptedAddressSpace(bases)
    )
    assert _replay_peak(trace, alloc) == row["peak_reserved"]
    real_segments = [[a, addr, size] for a, addr, size in entries if a in SEGMENT_ACTIONS]
    mine = [[s.action, s.address, s.size] for s in alloc.segment_events]
    if "expandable_segments:True" in row["allocator_config"]:
        # the virtual range an expandable segment reserves is the driver's choice and is not
        # scripted; every map and unmap must still match in order and size
        real_segments = [[a, size] for a, _, size in real_segments]
        mine = [[a, size] for a, _, size in mine]
    assert mine == real_segments


def test_all_recorded_workloads_are_replayed() -> None:
    assert len(TRACES) >= 30
