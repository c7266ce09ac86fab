"""The estimate search's stopping rule and guesses, on synthetic memory curves (no tracing):
how far below the largest fitting batch it may stop, and how many estimates it spends."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from memfit._events import Category
from memfit._units import GiB, MiB
from memfit.runtime._bs_search import TOLERANCE, EstimateSearch

BUDGET = 140 * GiB


def curve(fixed, per_sample, *, power=1.0, step=0):
    """estimate_at for a step needing ``fixed + per_sample * b ** power`` bytes, rounded up to
    ``step`` bytes (the allocator's segments move the least capacity in steps, not smoothly)."""

    def estimate_at(b):
        need = int(fixed + per_sample * b**power)
        if step:
            need = math.ceil(need / step) * step
        return SimpleNamespace(
            least_capacity=need,
            peak_reserved=need,
            peak_allocated=need,
            non_pytorch=0,
            alloc_retries=0,
            by_category={Category.ACTIVATION: int(per_sample * b**power)},
            replayed_from=(),
        )

    return estimate_at


def largest(estimate_at, max_batch=8192, multiple_of=1):
    """The true largest fitting batch, by walking every allowed size."""
    best = 0
    for b in range(multiple_of, max_batch + 1, multiple_of):
        if estimate_at(b).least_capacity <= BUDGET:
            best = b
    return best


@pytest.mark.parametrize(
    ("estimate_at", "multiple_of"),
    [
        (curve(2 * GiB, 540 * MiB), 1),  # BERT-like: batch ~260, exact
        (curve(1 * GiB, 84 * MiB, step=512 * MiB), 1),  # ResNet-like: ~1700, stepped
        (curve(1 * GiB, 84 * MiB, step=512 * MiB), 8),
        (curve(3 * GiB, 2 * MiB, power=1.3), 1),  # bends up: the line keeps undershooting
        (curve(3 * GiB, 120 * MiB, power=0.8), 1),  # bends down
    ],
    ids=["affine", "stepped", "stepped-multiple-of-8", "convex", "concave"],
)
def test_the_answer_is_within_the_tolerance_of_the_largest_fitting(estimate_at, multiple_of):
    search = EstimateSearch(estimate_at, multiple_of=multiple_of)
    found = search.largest_fitting(BUDGET)
    truth = largest(estimate_at, multiple_of=multiple_of)
    assert found <= truth  # never a batch whose estimate does not fit
    assert truth - found <= max(0, truth * TOLERANCE)
    assert estimate_at(found).least_capacity <= BUDGET
    # the search proved it: an estimate within the tolerance above failed
    failed = min(b for b, p in search.points.items() if p.total > BUDGET)
    assert failed - found <= max(multiple_of, found * TOLERANCE)
    assert len(search.points) <= 9, sorted(search.points)


def test_below_one_over_the_tolerance_the_answer_is_exact():
    estimate_at = curve(2 * GiB, 540 * MiB)  # ~260 < 1 / TOLERANCE
    search = EstimateSearch(estimate_at)
    found = search.largest_fitting(BUDGET)
    assert found == largest(estimate_at)
    assert found + 1 in search.points and search.points[found + 1].total > BUDGET


def test_stepped_large_batches_stop_without_creeping():
    # ResNet-50 fp32 on an H200 walked 1678, 1679, 1680 one estimate each before the tolerance
    search = EstimateSearch(curve(1 * GiB, 84 * MiB, step=512 * MiB))
    search.largest_fitting(BUDGET)
    assert len(search.points) <= 6, sorted(search.points)


def test_max_batch_is_reached_exactly_not_within_the_tolerance():
    # everything fits: the answer is max_batch itself, never a size just under it
    search = EstimateSearch(curve(1 * GiB, 1 * MiB), max_batch=5000)
    assert search.largest_fitting(BUDGET) == 5000
