"""The batch of each zoo workload: the one memfit's own estimate says fills 20-40% of an H100.

Traced at batches 2 and 4, the peak reserved is taken as linear in the batch to aim at 30% of
the GPU, then the estimate at that batch is asked (from memfit's batch model where it derives
one, ``memfit.estimator.BatchEstimates``, else traced) and the aim corrected through the two
nearest answers until the estimate lands in the band, the batch reaches its cap (a batch that
big is all the sweep runs), or a batch of one is already above it. What was asked is recorded
beside the choice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["BAND", "CAPS", "batch_cap", "choose", "next_batch", "search"]

BAND = (0.20, 0.40)  # of the GPU's memory, by the estimate's peak reserved
AIM = 0.30
CAPS = {  # the largest batch the sweep runs, by input
    "image": 1024,
    "text": 512,
    "audio": 512,
    "video": 128,
    "segmentation": 256,
    "detection": 64,
    "optical_flow": 64,
}
MAX_ASKS = 10


def batch_cap(entry: dict[str, Any]) -> int:
    """The cap of the entry's batch, by the kind of its input."""
    spec = entry.get("input", {})
    kind = spec.get("kind")
    if kind in CAPS:
        return CAPS[kind]
    main = spec.get("main")
    if main == "input_ids":
        return CAPS["text"]
    if main in ("input_values", "input_features"):
        return CAPS["audio"]
    if "frames" in spec:
        return CAPS["video"]
    return CAPS["image"]


def search(reserved_at: Callable[[int], int], capacity: int, cap: int) -> tuple[int, str]:
    """The batch whose reserved bytes (``reserved_at``) fall in ``BAND`` of ``capacity``, and
    why the search stopped: ``in band``, ``cap`` (below the band at the cap), ``one`` (above it
    at a batch of one) or ``closest`` (no batch in the band: the one nearest the aim)."""
    low, high = BAND[0] * capacity, BAND[1] * capacity
    aim = AIM * capacity
    seen: dict[int, int] = {}
    for batch in (2, min(4, cap)):
        seen[batch] = reserved_at(batch)
    for _ in range(MAX_ASKS):
        batch = next_batch(seen, aim, cap)
        if batch in seen:
            break
        value = seen[batch] = reserved_at(batch)
        if low <= value <= high:
            return batch, "in band"
        if value < low and batch >= cap:
            return batch, "cap"
        if value > high and batch <= 1:
            return batch, "one"
    best = min(seen, key=lambda b: (abs(seen[b] - aim), b))
    if low <= seen[best] <= high:
        return best, "in band"
    if seen[best] < low and best >= cap:
        return best, "cap"
    return best, "closest"


def next_batch(seen: dict[int, int], aim: float, cap: int) -> int:
    """The next batch to ask: between the two answers that bracket the aim (a line through
    them), else past the largest answers below it (a line through the two largest, or eight
    times the batch where they are flat), else halfway down from the smallest above it."""
    below = sorted((b, r) for b, r in seen.items() if r < aim)
    above = sorted((b, r) for b, r in seen.items() if r >= aim)
    if below and above:
        (b0, r0), (b1, r1) = below[-1], above[0]
        if b1 - b0 <= 1:
            return b0 if aim - r0 <= r1 - aim else b1
        guess = b0 + (aim - r0) * (b1 - b0) / max(r1 - r0, 1)
        return int(min(b1 - 1, max(b0 + 1, round(guess))))
    if below:
        (ba, ra), (bb, rb) = below[-2] if len(below) > 1 else below[-1], below[-1]
        slope = (rb - ra) / (bb - ba) if bb != ba else 0.0
        if slope * bb <= 0.05 * rb:  # flat so far: the fixed costs hide the batch's share
            return min(cap, bb * 8)
        return int(min(cap, max(bb + 1, round(bb + (aim - rb) / slope))))
    b, r = above[0]
    return max(1, min(b - 1, int(b * aim / r)))


def choose(entry: dict[str, Any], mode: str, gpu: Any) -> dict[str, Any]:
    """The batch of ``entry`` in ``mode`` for ``gpu``, with every estimate asked on the way;
    ``error`` where memfit could not estimate it (the batch is then the cap's fallback)."""
    from zoo_inputs import workload_for

    from memfit.estimator import BatchEstimates, estimate_workload

    start = time.perf_counter()
    cap = batch_cap(entry)
    asked: list[dict[str, Any]] = []
    notes: list[str] = []
    batches: Any = None

    def reserved_at(batch: int) -> int:
        nonlocal batches
        estimate = None
        derived = False
        if batches is None:
            batches = BatchEstimates(workload_for(entry, mode, batch, gpu))
        if batches is not False:
            try:
                estimate = batches.estimate(batch)
                derived = batches.derived(batch)
            except Exception as exc:  # memfit's batch model: recorded, then traced plainly
                notes.append(f"batch model at {batch}: {type(exc).__name__}: {exc}"[:400])
                batches = False
        if estimate is None:
            estimate = estimate_workload(workload_for(entry, mode, batch, gpu))
        asked.append(
            {
                "batch_size": batch,
                "allocated": estimate.peak_allocated,
                "reserved": estimate.peak_reserved,
                "derived": derived,
            }
        )
        return int(estimate.peak_reserved)

    capacity = int(gpu.total)
    batch, why = search(reserved_at, capacity, cap)
    final = next(a for a in reversed(asked) if a["batch_size"] == batch)
    return {
        "batch_size": batch,
        "why": why,
        "cap": cap,
        "estimate_allocated": final["allocated"],
        "estimate_reserved": final["reserved"],
        "fraction": round(final["reserved"] / capacity, 4),
        "derived": final["derived"],
        "asked": asked,
        "notes": notes,
        "seconds": round(time.perf_counter() - start, 2),
    }
