"""The emulator against the real allocator: traces recorded on an H200 with torch 2.11.

``data/h200_torch2.11_models.json.gz`` holds whole allocator traces of real training steps;
they are replayed with :func:`replay` from the trace alone, as a recorded snapshot would be.

``data/h200_torch2.11.json.gz`` was written by ``gpu_reference.py`` (see there): for each case,
a seeded list of allocs, frees and ``empty_cache`` calls run through torch's own caching
allocator, with ``allocated`` / ``reserved`` after every operation, every segment event, the
address of every allocation and the final snapshot. Replayed here with the real segment
addresses (:class:`ScriptedAddressSpace`), everything must match exactly.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from memfit._events import MemoryEvent
from memfit.allocator import (
    AllocatorOOM,
    CachingAllocator,
    ScriptedAddressSpace,
    replay,
    segment_bases_from_trace,
)

DATA = Path(__file__).parent / "data" / "h200_torch2.11.json.gz"
with gzip.open(DATA, "rt") as f:
    CASES: dict[str, dict[str, Any]] = json.load(f)


def run(case: dict[str, Any]) -> tuple[CachingAllocator, list[list[int]], list[int]]:
    """Replay a case's operations; returns the allocator, per-op records, alloc addresses."""
    total = case["total_memory"]
    streams = {0: int(case["streams"]["0"]), 1: int(case["streams"]["1"])}
    bases = segment_bases_from_trace(case["segment_trace"], device_total=total)
    a = CachingAllocator(
        case["conf"], device_total=total, address_space=ScriptedAddressSpace(bases)
    )
    live: set[int] = set()
    records, addresses = [], []
    for op in case["ops"]:
        oom = 0
        if op[0] == "alloc":
            try:
                addresses.append(a.malloc(op[1], op[2], streams[op[3]]))
                live.add(op[1])
            except AllocatorOOM:
                oom = 1
        elif op[0] == "free":
            if op[1] in live:
                a.free(op[1])
                live.discard(op[1])
        else:
            a.empty_cache()
        records.append([a.allocated, a.reserved, oom])
    return a, records, addresses


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_the_real_allocator(name: str) -> None:
    case = CASES[name]
    a, records, addresses = run(case)
    first_diff = next(
        (
            i
            for i, (mine, real) in enumerate(zip(records, case["records"], strict=True))
            if mine != real
        ),
        None,
    )
    assert first_diff is None, (first_diff, case["ops"][first_diff], records[first_diff])
    assert len(records) == len(case["records"])
    assert [[e.action, e.address, e.size] for e in a.segment_events] == case["segment_trace"]
    assert addresses == case["alloc_addresses"]
    state = {True: "active_allocated", False: "inactive"}
    mine = [
        [
            s.address,
            s.total_size,
            [[b.address, b.size, b.requested_size, state[b.allocated]] for b in s.blocks],
        ]
        for s in a.segments()
    ]
    real = [[s["address"], s["total_size"], s["blocks"]] for s in case["segments"]]
    assert mine == real


def test_the_reference_covers_the_interesting_paths() -> None:
    ooms = {n for n, c in CASES.items() if any(r[2] for r in c["records"])}
    assert {"fraction_oom", "fraction_split_oom", "fraction_expandable_oom", "gc"} <= ooms
    unmaps = {
        n for n, c in CASES.items() if any(t[0] == "segment_unmap" for t in c["segment_trace"])
    }
    assert "expandable" in unmaps
    assert all(c["torch"].startswith("2.11") and "H200" in c["device"] for c in CASES.values())


MODELS = Path(__file__).parent / "data" / "h200_torch2.11_models.json.gz"
with gzip.open(MODELS, "rt") as f:
    MODEL_TRACES: dict[str, dict[str, Any]] = json.load(f)


@pytest.mark.parametrize("name", sorted(MODEL_TRACES))
def test_replaying_a_real_training_trace(name: str) -> None:
    """Four AdamW steps of a small transformer (changing batch, bf16 autocast on odd steps)."""
    case = MODEL_TRACES[name]
    trace = case["trace"]
    events = [
        MemoryEvent("alloc" if t[0] == "alloc" else "free", t[1], t[2], t[3])
        for t in trace
        if t[0] in ("alloc", "free_completed")
    ]
    bases = segment_bases_from_trace(trace, device_total=case["total_memory"])
    result = replay(
        events,
        case["conf"],
        device_total=case["total_memory"],
        address_space=ScriptedAddressSpace(bases),
    )
    stats = case["stats"]
    assert (result.peak_allocated, result.peak_reserved) == (
        stats["allocated_bytes.all.peak"],
        stats["reserved_bytes.all.peak"],
    )
    assert (result.allocated[-1], result.reserved[-1]) == (
        stats["allocated_bytes.all.current"],
        stats["reserved_bytes.all.current"],
    )
    real_events = [t[:3] for t in trace if t[0].startswith("segment_")]
    assert [[e.action, e.address, e.size] for e in result.segment_events] == real_events
    state = {True: "active_allocated", False: "inactive"}
    mine = [
        [
            s.address,
            s.total_size,
            [[b.address, b.size, b.requested_size, state[b.allocated]] for b in s.blocks],
        ]
        for s in result.segments
    ]
    assert mine == case["segments"]
