"""Request rounding and segment sizes (round_size / get_allocation_size in the torch source)."""

from __future__ import annotations

import pytest

from memfit.allocator import AllocatorConfig, allocation_size, round_size
from memfit.allocator._rounding import divisions_for, roundup_power2_next_division

KiB, MiB, GiB = 1024, 1024**2, 1024**3
PLAIN = AllocatorConfig().roundup_power2_divisions


@pytest.mark.parametrize(
    ("size", "rounded"),
    [(1, 512), (511, 512), (512, 512), (513, 1024), (1000, 1024), (MiB, MiB), (MiB + 1, MiB + 512)],
)
def test_requests_round_up_to_512_bytes(size: int, rounded: int) -> None:
    assert round_size(size, PLAIN) == rounded


@pytest.mark.parametrize(
    ("size", "segment"),
    [
        (512, 2 * MiB),  # small pool: 2 MiB segments
        (MiB, 2 * MiB),  # 1 MiB is still small (<= kSmallSize)
        (MiB + 512, 20 * MiB),  # large pool below 10 MiB: a whole 20 MiB segment
        (10 * MiB - 512, 20 * MiB),
        (10 * MiB, 10 * MiB),  # kMinLargeAlloc and up: rounded to 2 MiB
        (10 * MiB + 512, 12 * MiB),
        (100 * MiB + 1, 102 * MiB),
    ],
)
def test_segment_sizes(size: int, segment: int) -> None:
    assert allocation_size(size, 20 * MiB) == segment


def test_large_segment_size_replaces_the_20_mib_segment() -> None:
    assert allocation_size(3 * MiB, 64 * MiB) == 64 * MiB
    assert allocation_size(12 * MiB, 64 * MiB) == 12 * MiB  # only below 10 MiB


def test_power2_division_steps() -> None:
    # the example of the torch source: 1200 with 4 divisions -> 1280
    assert roundup_power2_next_division(1200, 4) == 1280
    assert roundup_power2_next_division(1024, 4) == 1024  # powers of 2 stay
    assert roundup_power2_next_division(1280, 4) == 1280  # already on a step
    assert roundup_power2_next_division(5 * MiB + 1, 4) == 6 * MiB  # steps of 1 MiB in [4, 8)


def test_roundup_power2_divisions_applies_above_512_times_divisions() -> None:
    table = AllocatorConfig.parse("roundup_power2_divisions:4").roundup_power2_divisions
    assert round_size(1200, table) == 1536  # 1200 <= 512 * 4: plain 512 rounding
    assert round_size(3000, table) == 3072  # 2048 + 1024-byte steps
    assert round_size(3 * MiB + 5, table) == 3 * MiB + 512 * KiB
    assert round_size(5 * MiB + 1, table) == 6 * MiB


def test_roundup_list_form_per_interval() -> None:
    table = AllocatorConfig.parse(
        "roundup_power2_divisions:[256:1,512:2,>:4]"
    ).roundup_power2_divisions
    # intervals below the first one named take its value: 1 (no power-2 rounding)
    assert divisions_for(3 * MiB, table) == 1
    assert round_size(300 * MiB + 1, table) == 300 * MiB + 512
    # [512 MiB, 1 GiB): 2 divisions, steps of 256 MiB
    assert round_size(600 * MiB, table) == 768 * MiB
    # '>' covers every interval after the last named one: 4 divisions from 1 GiB on
    assert round_size(1300 * MiB, table) == 1536 * MiB
    assert round_size(40 * GiB, table) == 40 * GiB  # 32 GiB and up share the last interval


def test_divisions_index_is_clamped() -> None:
    table = tuple(range(16))
    assert divisions_for(1, table) == 0  # below 1 MiB: first interval
    assert divisions_for(2 * MiB, table) == 1
    assert divisions_for(1 << 50, table) == 15
