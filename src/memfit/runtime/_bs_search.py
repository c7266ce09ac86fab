"""The CPU half of the batch-size finder: the largest batch whose estimate fits a budget.

Each estimate costs about a second of CPU whatever the batch size (the step runs on meta
tensors), so the search spends as few as it can. Peak memory is close to affine in the batch
size, so after two estimates a straight line through the nearest points lands within a sample
or two of the answer; each further estimate narrows a bracket ``fits <= b < fails`` and the
search stops when the bracket is exact (the estimate at ``b`` fits and the one at the next
allowed size does not) or, for large batches, narrower than :data:`TOLERANCE` of ``b``: near
the budget the least capacity moves in allocator-sized steps, not smoothly, and creeping up
on the last few samples cost ResNet-50 three estimates for 0.2% more batch. Two guesses in a
row that do not halve the bracket are followed by a bisection, so a curve that is not affine
still ends in a bounded number of estimates.

Given ``traced_at`` (an estimate made from a trace at its own batch), the estimates ``estimate_at``
makes may be replays of a batch model's derived traces (``Point.replayed``): the answer is then
estimated again from a trace, and where that differs from its replay, every replayed point is
dropped and the search runs again on traces (its answer, and the path to it, are then those of a
search that traced every batch).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from memfit._events import Category
from memfit.estimator import Estimate

__all__ = ["TOLERANCE", "EstimateSearch", "Point"]

# what grows with the batch at the peak: used for the first guess only
_PER_SAMPLE = (Category.ACTIVATION, Category.TEMPORARY, Category.INPUT)
_OVERSHOOT = 1.1
# a bracket this narrow, relative to the batch that fits, ends the search: the answer is at
# most this far below the largest batch whose estimate fits (exact below 1 / TOLERANCE)
TOLERANCE = 0.0025


@dataclass(frozen=True)
class Point:
    """One estimate the search made: batch size, predicted peaks, seconds it took.

    ``need`` is the reserved memory the step must be able to get: its least capacity where
    the estimate has one (the allocator frees its cache under pressure, so a step runs in
    less than its free-running ``peak_reserved``), else ``peak_reserved``.
    """

    batch_size: int
    peak_reserved: int
    peak_allocated: int
    total: int  # need + the CUDA context: what the GPU must hold
    seconds: float
    context: int = 0
    alloc_retries: int | None = None  # cache frees a run makes held to the budget (estimated)
    replayed: bool = False  # replayed from a batch model's derived trace, not traced

    @property
    def need(self) -> int:
        return self.total - self.context


@dataclass
class EstimateSearch:
    """Estimates by batch size, cached, and the largest size under a budget.

    ``estimate_at(b)`` returns the estimate of the workload at batch ``b``. Sizes are the
    multiples of ``multiple_of`` up to ``max_batch``.
    """

    estimate_at: Callable[[int], Estimate]
    multiple_of: int = 1
    max_batch: int = 8192
    traced_at: Callable[[int], Estimate] | None = None  # from a trace, never a replay
    points: dict[int, Point] = field(default_factory=dict)
    estimates: dict[int, Estimate] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return sum(p.seconds for p in self.points.values())

    def point(self, batch_size: int) -> Point:
        """The estimate at ``batch_size``, from the cache or made now."""
        found = self.points.get(batch_size)
        if found is None:
            found = self._made(batch_size, self.estimate_at)
        return found

    def _made(self, batch_size: int, estimate_at: Callable[[int], Estimate]) -> Point:
        start = time.perf_counter()
        est = estimate_at(batch_size)
        need = est.least_capacity if est.least_capacity is not None else est.peak_reserved
        found = Point(
            batch_size,
            est.peak_reserved,
            est.peak_allocated,
            need + est.non_pytorch,
            time.perf_counter() - start,
            est.non_pytorch,
            est.alloc_retries,
            replayed=bool(est.replayed_from),
        )
        self.points[batch_size] = found
        self.estimates[batch_size] = est
        return found

    def traced_point(self, batch_size: int) -> Point:
        """The point at ``batch_size`` from a trace at that batch: made again where it was a
        replay (``traced_at``)."""
        found = self.point(batch_size)
        if found.replayed and self.traced_at is not None:
            found = self._made(batch_size, self.traced_at)
        return found

    def _confirmed(self, batch_size: int) -> bool:
        """Whether the point at ``batch_size`` is a trace's numbers: made from a trace where it
        was replayed; False (every replayed point dropped) where the two differ."""
        replayed = self.point(batch_size)
        traced = self.traced_point(batch_size)
        if _numbers(traced) == _numbers(replayed):
            return True
        for b in [b for b, p in self.points.items() if p.replayed]:
            del self.points[b], self.estimates[b]
        return False

    def per_sample(self) -> int:
        """Bytes one more sample adds, from the two estimates farthest apart (0 if < 2)."""
        if len(self.points) < 2:
            return 0
        lo, hi = min(self.points), max(self.points)
        return max(0, (self.points[hi].total - self.points[lo].total) // (hi - lo))

    def largest_fitting(self, budget: int) -> int:
        """The largest allowed batch whose predicted total is at most ``budget``; 0 if even
        the smallest does not fit. Estimates are assumed to grow with the batch. The answer's
        point is a trace's (:meth:`traced_point`)."""
        while True:
            answer = self._largest(budget)
            if answer == 0 or self._confirmed(answer):
                return answer

    def _largest(self, budget: int) -> int:
        step, top = self.multiple_of, self.max_batch // self.multiple_of
        fits_k, fails_k = 0, top + 1  # bracket in units of multiple_of
        for k in sorted(b // step for b in self.points if b % step == 0 and b <= self.max_batch):
            if self.points[k * step].total <= budget:
                fits_k = max(fits_k, k)
            else:
                fails_k = min(fails_k, k)
        fits_k = min(fits_k, fails_k - 1)
        slow = 0  # guesses in a row that did not halve the bracket
        while not self._narrow(fits_k, fails_k, top):
            guess = self._guess(budget, fits_k, fails_k, bisect=slow >= 2)
            before = fails_k - fits_k
            if self.point(guess * step).total <= budget:
                fits_k = guess
            else:
                fails_k = guess
            slow = slow + 1 if (fails_k - fits_k) * 2 > before and slow < 2 else 0
        return fits_k * step

    @staticmethod
    def _narrow(fits_k: int, fails_k: int, top: int) -> bool:
        """Whether the bracket ends the search (in units of ``multiple_of``): exact, or within
        the tolerance below a size that is known to fail."""
        width = fails_k - fits_k
        return width <= 1 or (fails_k <= top and width <= fits_k * TOLERANCE)

    def _guess(self, budget: int, fits_k: int, fails_k: int, bisect: bool) -> int:
        """Next size to estimate, in units, strictly inside the bracket."""
        step = self.multiple_of
        top = self.max_batch // step
        if fits_k == 0:
            guess = 1  # whether anything fits at all decides the rest
        elif bisect and fails_k <= top:
            guess = (fits_k + fails_k) // 2
        else:
            guess = self._line_guess(budget, fits_k, fails_k, top)
        # a line that lands on the fitting end (a plateau of the stepped least capacity, an
        # estimate at the budget) would creep up a sample a time: step at least a tolerance
        # beyond it while no size is known to fail (if that one fails, the search is done),
        # else half a tolerance inside the bracket
        if fails_k > top:
            return min(max(guess, fits_k + max(1, int(fits_k * TOLERANCE))), top)
        inside = max(1, int(fits_k * TOLERANCE / 2))
        if fails_k - fits_k <= 2 * inside:
            inside = 1
        return min(max(guess, fits_k + inside), fails_k - inside)

    def _line_guess(self, budget: int, fits_k: int, fails_k: int, top: int) -> int:
        step = self.multiple_of
        low = self.points[fits_k * step]
        if fails_k <= top:
            high = self.points[fails_k * step]
        else:
            others = [p for b, p in self.points.items() if b != low.batch_size]
            if not others:
                return self._first_guess(budget, low)
            # the farthest point: over a long stretch the allocator's steps average out
            high = min(others, key=lambda p: p.batch_size)
        slope = (high.total - low.total) / (high.batch_size - low.batch_size)
        if slope <= 0:
            return top  # memory does not grow with the batch: try the largest allowed
        reach = (budget - low.total) / slope
        if fails_k > top:
            # no failing size yet: aim a little beyond the line, so that a line which keeps
            # falling short (the curve bends up) is bracketed in one estimate, not crept up on
            reach *= _OVERSHOOT
        return int(reach + low.batch_size) // step

    def _first_guess(self, budget: int, low: Point) -> int:
        """From one estimate: the bytes at its peak that scale with the batch."""
        est = self.estimates[low.batch_size]
        scaling = sum(est.by_category.get(c, 0) for c in _PER_SAMPLE)
        per_sample = max(1, scaling // low.batch_size)
        return (low.batch_size + (budget - low.total) // per_sample) // self.multiple_of


def _numbers(point: Point) -> tuple[int, int, int, int | None]:
    """What a point answers with (its seconds and how it was made aside)."""
    return (point.peak_reserved, point.peak_allocated, point.total, point.alloc_retries)
