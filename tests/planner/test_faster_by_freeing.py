"""A faster candidate that needs more than the budget with its cache kept, but runs within it by
the allocator freeing its cache when the GPU is full, is named in a note, not chosen (Qwen2.5-0.5B
at 16 GiB, session 19: 8 x 1 fully checkpointed ran under the cap in 150 ms, the plan in 283)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from memfit.planner import _full
from memfit.planner._plan_result import Candidate, Evaluated
from memfit.workload import make_workload

G = 2**30


def _evaluated(c: Candidate, allocated: float, needed: float, seconds: float) -> Evaluated:
    context = 0.5 * G
    return Evaluated(
        c,
        int(allocated),
        int(needed - context),
        int(needed),
        seconds,
        1.0,
        None,
        "gpu",
        needed <= 13 * G,
        (),
    )


def _evaluator(least: float, monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    monkeypatch.setattr(
        _full, "estimate_workload", lambda w, **kw: SimpleNamespace(least_capacity=int(least))
    )
    chosen = _evaluated(Candidate(4, 2, "bf16-mixed", 0.5, "adamw-fused"), 10 * G, 12 * G, 0.3)
    fast = Candidate(8, 1, "bf16-mixed", True, "adamw-fused", "expandable_segments:True")
    hungry = Candidate(8, 1, "bf16-mixed", False, "adamw-fused")  # allocates over the budget
    seen = {
        chosen.candidate: chosen,
        fast: _evaluated(fast, 9 * G, 13.5 * G, 0.2),
        hungry: _evaluated(hungry, 14 * G, 15 * G, 0.1),
    }
    workload = make_workload(lambda: nn.Linear(4, 4), lambda n: torch.randn(n, 4), batch_size=8)
    return SimpleNamespace(seen=seen, usable=13 * G, traces=0, workload=lambda c: workload)


def test_the_fastest_that_fits_only_by_freeing_the_cache_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ev = _evaluator(11 * G, monkeypatch)
    chosen = ev.seen[Candidate(4, 2, "bf16-mixed", 0.5, "adamw-fused")]
    note = _full.faster_by_freeing_note(ev, chosen, 0.05)  # type: ignore[arg-type]
    assert note is not None
    assert note.startswith("micro-batch 8 x 1, bf16-mixed, full checkpointing")
    assert "1.5x as fast" in note and "needs 13.50 GiB with its cache kept" in note
    assert "runs in 11.50 GiB only because the allocator frees its cache" in note
    assert ev.traces == 1


def test_no_note_where_even_freeing_the_cache_does_not_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ev = _evaluator(12.75 * G, monkeypatch)  # + 0.5 GiB outside PyTorch: over 13 GiB
    chosen = ev.seen[Candidate(4, 2, "bf16-mixed", 0.5, "adamw-fused")]
    assert _full.faster_by_freeing_note(ev, chosen, 0.05) is None  # type: ignore[arg-type]
    slow = _full.faster_by_freeing_note(ev, ev.seen[next(iter(ev.seen))], 0.9)  # type: ignore[arg-type]
    assert slow is None  # nothing faster by more than the tie
