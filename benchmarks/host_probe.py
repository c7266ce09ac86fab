"""How fast this machine's CPU issues PyTorch ops (for the step-time benchmarks).

A step of many small ops waits on the host, and hosts differ: the same BERT step on the same
GPU model took 62 ms in one call to the GPU host and 93 ms in another. ``op_profile.py`` and
``calibrate_gpu.py`` record :func:`probe_seconds` beside their timings, to tell whether a
probe this cheap predicts the host's speed. On 2026-12-02 it did not: it varied 2x between
processes of the same call, and not with their steps' times.
"""

from __future__ import annotations

import time

import torch

__all__ = ["probe_seconds"]

_OPS = 2000
_REPEATS = 7


def probe_seconds() -> float:
    """Seconds per small eager op issued from Python on the CPU (an out-of-place add of two
    16-element tensors into a third: the dispatcher's path with no work behind it), the fastest
    of seven runs of 2000 after a warm-up (the slower ones measured other processes too).
    About 30 ms."""
    a, b, out = torch.ones(16), torch.ones(16), torch.empty(16)
    for _ in range(_OPS):  # the first thousand calls of a process run slower
        torch.add(a, b, out=out)
    runs = []
    for _ in range(_REPEATS):
        started = time.perf_counter()
        for _ in range(_OPS):
            torch.add(a, b, out=out)
        runs.append((time.perf_counter() - started) / _OPS)
    return min(runs)
