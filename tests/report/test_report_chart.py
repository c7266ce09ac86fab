"""Downsampling and chart layout shared by the PNG and SVG writers."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from memfit._series import downsample
from memfit._units import GiB, MiB
from memfit.estimator._result import Estimate, Timeline
from memfit.report._chart import chart_data, format_index, nice_ticks
from memfit.report._text import format_count, shorten_middle


def test_downsample_keeps_the_maximum() -> None:
    rng = random.Random(1)
    n = 100_003
    allocated = [rng.randrange(0, 10 * GiB) for _ in range(n)]
    reserved = [a + rng.randrange(0, GiB) for a in allocated]
    peak = 71_234
    allocated[peak] = 12 * GiB
    reserved[99_999] = 15 * GiB
    series = downsample(allocated, reserved, 500)
    assert len(series.x) <= 500
    assert len(series.x) == len(series.allocated) == len(series.reserved)
    assert max(series.allocated) == 12 * GiB
    assert series.allocated[series.x.index(peak)] == 12 * GiB
    assert max(series.reserved) == 15 * GiB
    assert series.x[0] == 0 and series.x[-1] == n - 1
    assert all(a < b for a, b in zip(series.x, series.x[1:], strict=False))
    assert all(allocated[x] == a for x, a in zip(series.x, series.allocated, strict=True))


def test_downsample_never_understates() -> None:
    allocated = [i % 97 for i in range(50_000)]
    series = downsample(allocated, allocated, 100)
    # Every bucket reports its maximum, so the curve's top is the data's top everywhere.
    assert min(series.allocated[1:-1]) == 96


def test_downsample_leaves_short_timelines_alone() -> None:
    series = downsample([1, 5, 2], [5, 5, 5], 2000)
    assert series.x == [0, 1, 2]
    assert series.allocated == [1, 5, 2]


def test_downsample_needs_room_for_the_ends() -> None:
    with pytest.raises(ValueError, match="max_points must be at least 3"):
        downsample([1] * 10, [1] * 10, 2)


def test_nice_ticks() -> None:
    assert nice_ticks(11.5) == [0, 2, 4, 6, 8, 10]
    assert nice_ticks(0.0) == [0.0]
    ticks = nice_ticks(1.18)
    assert ticks[0] == 0 and ticks[-1] <= 1.18 and len(ticks) >= 4


def test_format_index_and_count() -> None:
    assert format_index(750) == "750"
    assert format_index(250_000) == "250k"
    assert format_index(1_500_000) == "1.5M"
    assert format_count(124_439_808) == "124.4M"
    assert format_count(6_738_415_616) == "6.74B"


def test_shorten_middle_keeps_both_ends() -> None:
    name = "encoder.layers.23.self_attention.query_key_value.lora_A.default"
    short = shorten_middle(name, 30)
    assert len(short) == 30
    assert short.startswith("encoder.layers") and short.endswith("lora_A.default")
    assert "…" in short
    assert shorten_middle("lm_head", 30) == "lm_head"


def test_phases_span_the_timeline(estimate_factory: Callable[..., Estimate]) -> None:
    data = chart_data(estimate_factory())
    assert [p.name for p in data.phases] == ["step1.forward", "step1.backward", "step1.optimizer"]
    assert [p.kind for p in data.phases] == ["forward", "backward", "optimizer"]
    assert data.phases[0].start == 0 and data.phases[-1].end == data.length
    assert all(a.end == b.start for a, b in zip(data.phases, data.phases[1:], strict=False))
    assert max(p.peak_allocated for p in data.phases) == data.peak_allocated


def test_capacity_line_on_or_off_the_chart(
    estimate_factory: Callable[..., Estimate], timeline_factory: Callable[..., Timeline]
) -> None:
    near = chart_data(estimate_factory(gpu="4090", timeline=timeline_factory(scale=3 * GiB)))
    assert near.capacity_on_chart and near.capacity is not None
    assert near.y_top > near.capacity
    far = chart_data(estimate_factory(gpu="h200"))
    assert not far.capacity_on_chart
    assert far.capacity is not None and far.y_top < far.capacity
    assert chart_data(estimate_factory()).capacity is None


def test_small_workloads_are_drawn_in_mib(
    estimate_factory: Callable[..., Estimate], timeline_factory: Callable[..., Timeline]
) -> None:
    data = chart_data(estimate_factory(timeline=timeline_factory(scale=8 * MiB)))
    assert data.unit_name == "MiB"
