"""Downsample a memory timeline without losing its peaks.

A timeline holds one point per allocator event, up to about a million; neither a chart nor
a JSON document needs that many. :func:`downsample` keeps the maximum of each bucket, so the
peak survives exactly. It is data, not drawing: ``memfit snapshot --json`` writes its result
and the charts of :mod:`memfit.report` draw it, so it lives below both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["DEFAULT_MAX_POINTS", "Series", "downsample"]

DEFAULT_MAX_POINTS = 2000


@dataclass(frozen=True, slots=True)
class Series:
    """A (possibly downsampled) timeline: event indices and the memory after each."""

    x: list[int]
    allocated: list[int]
    reserved: list[int]


def downsample(
    allocated: Sequence[int], reserved: Sequence[int], max_points: int = DEFAULT_MAX_POINTS
) -> Series:
    """At most ``max_points`` points, keeping the maximum of each bucket.

    Each bucket contributes one point: at the event where allocated memory is highest in the
    bucket, with that allocated value and the bucket's highest reserved value. So the global
    maxima of both series are kept exactly, and a chart of the result never understates memory.
    The first and last events are kept too so the curve spans the whole step.
    """
    if max_points < 3:
        raise ValueError(f"max_points must be at least 3, got {max_points}")
    n = min(len(allocated), len(reserved))
    if n <= max_points:
        return Series(list(range(n)), list(allocated[:n]), list(reserved[:n]))
    alloc = np.asarray(allocated[:n], dtype=np.int64)
    resv = np.asarray(reserved[:n], dtype=np.int64)
    size = math.ceil(n / (max_points - 2))
    buckets = math.ceil(n / size)
    pad = buckets * size - n
    low = np.iinfo(np.int64).min
    alloc_b = np.pad(alloc, (0, pad), constant_values=low).reshape(buckets, size)
    resv_b = np.pad(resv, (0, pad), constant_values=low).reshape(buckets, size)
    index = alloc_b.argmax(axis=1) + np.arange(buckets, dtype=np.int64) * size
    x = index.tolist()
    a = alloc_b.max(axis=1).tolist()
    r = resv_b.max(axis=1).tolist()
    if x[0] != 0:
        x.insert(0, 0)
        a.insert(0, int(alloc[0]))
        r.insert(0, int(resv[0]))
    if x[-1] != n - 1:
        x.append(n - 1)
        a.append(int(alloc[-1]))
        r.append(int(resv[-1]))
    return Series(x, a, r)
