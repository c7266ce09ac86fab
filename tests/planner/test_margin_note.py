"""A faster candidate that fits the budget but not the margin kept free is named, with the margin
that would choose it (ResNet-50 at 4 GiB on an H200, 2026-12-03: 64 x 2 without checkpointing
ran 8% faster than the plan under the bare budget)."""

from __future__ import annotations

from types import SimpleNamespace

from memfit._gpus import resolve_gpu
from memfit.planner import _full
from memfit.planner._plan_result import Candidate, Evaluated

G = 2**30


def _evaluated(c: Candidate, needed: float, seconds: float, usable: int) -> Evaluated:
    n = int(needed)
    return Evaluated(c, n, n, n, seconds, 1.0, None, "gpu", n <= usable, ())


def test_the_fastest_that_fits_only_without_the_margin_is_named_with_that_margin() -> None:
    gpu = resolve_gpu("4GiB")
    usable = int(gpu.total * 0.95)
    plan = Candidate(64, 2, "bf16-mixed", 0.25, "adamw-fused")
    fast = Candidate(64, 2, "bf16-mixed", False, "adamw-fused")
    over = Candidate(128, 1, "bf16-mixed", False, "adamw-fused")  # over the budget itself
    seen = {
        plan: _evaluated(plan, 3.6 * G, 0.068, usable),
        fast: _evaluated(fast, 3.9 * G, 0.060, usable),
        over: _evaluated(over, 4.5 * G, 0.050, usable),
    }
    ev = SimpleNamespace(seen=seen, usable=usable, gpu=gpu)
    note = _full.margin_note(ev, seen[plan], 0.05)  # type: ignore[arg-type]
    assert note is not None
    assert note.startswith("micro-batch 64 x 2, bf16-mixed, no checkpointing, adamw-fused")
    assert "1.1x as fast and needs 3.90 GiB: within the 4.00 GiB budget" in note
    assert "margin=0.02 (--margin 0.02) would choose it" in note
    assert _full.margin_note(ev, seen[fast], 0.05) is None  # nothing faster fits the budget


def test_no_note_where_the_faster_one_is_within_the_tie() -> None:
    gpu = resolve_gpu("4GiB")
    usable = int(gpu.total * 0.95)
    plan = Candidate(64, 2, "bf16-mixed", 0.25, "adamw-fused")
    close = Candidate(64, 2, "bf16-mixed", False, "adamw-fused")
    seen = {
        plan: _evaluated(plan, 3.6 * G, 0.068, usable),
        close: _evaluated(close, 3.9 * G, 0.066, usable),
    }
    ev = SimpleNamespace(seen=seen, usable=usable, gpu=gpu)
    assert _full.margin_note(ev, seen[plan], 0.05) is None  # type: ignore[arg-type]
