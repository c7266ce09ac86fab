"""How fast this machine's CPU issues PyTorch ops, against the one the calibration was measured
with (issue 13).

A step of many small ops waits on the host, and hosts differ: the same BERT step on the same
GPU model took 70 ms on one H200 machine and 90 ms on another. The calibration keeps what
:func:`probe_seconds` measured on its machine (``host_probe``); planning on a machine with the
calibrated GPU measures it again and scales the host's costs by the ratio.
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
