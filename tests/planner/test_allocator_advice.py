"""Which allocator settings to replay on a trace, and which one to recommend."""

from __future__ import annotations

from memfit.advice import WhatIf, allocator_candidates, streamable_configs
from memfit.advice import recommend_allocator as recommend
from memfit.allocator import AllocatorConfig

MiB = 1 << 20
GiB = 1 << 30


def _row(label: str, saved: int | None) -> WhatIf:
    peak = None if saved is None else 10 * GiB - saved
    return WhatIf(label, False, peak, peak, saved, None, None)


def test_recommend_only_when_it_saves_2_percent_and_256_mib() -> None:
    baseline = 10 * GiB
    recorded = WhatIf("default", True, baseline, baseline, 0, None, None)
    assert recommend([recorded, _row("a", 300 * MiB)], baseline).startswith(
        "Set PYTORCH_CUDA_ALLOC_CONF=a:"
    )
    assert "Keep the recorded settings: the best one tried (a) saves only" in recommend(
        [recorded, _row("a", 200 * MiB)], baseline
    )
    assert "only" in recommend([recorded, _row("a", 300 * MiB)], 20 * GiB)  # 1.5%
    assert "no setting tried lowers" in recommend([recorded, _row("a", -5)], baseline)
    assert "nothing to recommend" in recommend([recorded, _row("a", None)], baseline)


def test_the_recorded_setting_is_not_tried_again() -> None:
    labels = [c.label for c in allocator_candidates(AllocatorConfig())]
    assert labels == [
        "expandable_segments:True",
        "max_split_size_mb:128",
        "max_split_size_mb:512",
        "garbage_collection_threshold:0.8",
    ]
    expandable = AllocatorConfig(expandable_segments=True)
    assert "default" in [c.label for c in allocator_candidates(expandable)]
    assert expandable not in [c.config for c in allocator_candidates(expandable)]


def test_garbage_collection_is_replayed_under_a_memory_fraction() -> None:
    (gc,) = [c for c in allocator_candidates(AllocatorConfig()) if c.with_capacity]
    assert gc.note(True) == "with set_per_process_memory_fraction(0.999) of the given capacity"
    assert gc.note(False) == "with set_per_process_memory_fraction(0.999) = the recorded peak"
    assert all(c.note(True) is None for c in allocator_candidates(AllocatorConfig()) if c != gc)
    assert gc.config not in streamable_configs()
    assert AllocatorConfig() not in streamable_configs()
