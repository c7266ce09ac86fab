"""``memfit calibrate``: the step-time model's rates measured on this machine's GPU and host,
saved where the planner finds them.

memfit ships the H200's rates (``memfit/planner/data``). Another GPU type runs its products,
attention and memory traffic at its own rates, and every host issues ops at its own speed, so
:func:`calibrate` measures them here: the curves on the GPU (a minute or two), and, when
asked, a factor per kind of step for the host's cost of an op, from reference models run at a
batch of one (:mod:`._host_scale`; on an H200 host it did not predict full-size steps better,
so it is not measured by default). What it does not measure (the memory-bound families'
factors, fitted on profiled training steps) is kept from the shipped calibration, and the file
says so.
"""

from __future__ import annotations

import typing as _typing

from memfit._lazy import lazy_attributes as _lazy_attributes
from memfit.planner.calibration._store import (
    calibration_dir,
    device_key,
    read_calibration,
    save_calibration,
    saved,
    shipped,
)
from memfit.planner.calibration._summary import headline

if _typing.TYPE_CHECKING:
    from memfit.planner.calibration._calibrate import DEFAULT_PARTS, PARTS, calibrate

__all__ = [
    "DEFAULT_PARTS",
    "PARTS",
    "calibrate",
    "calibration_dir",
    "device_key",
    "headline",
    "read_calibration",
    "save_calibration",
    "saved",
    "shipped",
]


# torch is imported on first use
__getattr__, __dir__ = _lazy_attributes(
    __name__, dict.fromkeys(("DEFAULT_PARTS", "PARTS", "calibrate"), "_calibrate"), globals()
)
