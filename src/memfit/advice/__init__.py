"""Advice: which changes could make a step fit, what each saves, and their ranking.

The one home of the what-if candidates and their wording, used by ``memfit.snapshot`` (which
allocator settings to replay, which to recommend), ``memfit.oom`` (the fixes of an
out-of-memory report), ``memfit.runtime`` (the advice in its errors) and ``memfit.planner``.

* :class:`Fix` is one way to avoid running out of memory: its expected saving in bytes and
  where that number comes from, the :class:`Change` to a setting a planner can apply, how a
  person makes it, and its cost; :func:`rank` orders fixes by saving.
* :func:`failure_fixes` ranks the fixes of a :class:`Failure` (the facts at an out-of-memory
  error), scaling the working set with the measured :class:`Factor` s.
* :func:`allocator_candidates` are the allocator settings worth replaying on a trace; each
  replay's saving is a :class:`WhatIf`, and :func:`recommend_allocator` picks one worth
  changing for.
* :func:`does_not_fit_message`, :func:`smaller_step_advice` and
  :func:`optimizer_step_advice`: the sentences of a step that does not fit.

It imports the allocator and the basics only, and no torch.
"""

from __future__ import annotations

from memfit.advice._allocator import (
    GC_FRACTION,
    MIN_SAVING_BYTES,
    MIN_SAVING_FRACTION,
    AllocatorCandidate,
    WhatIf,
    alloc_conf_how,
    alloc_conf_text,
    allocator_candidates,
    recommend_allocator,
    streamable_configs,
)
from memfit.advice._factors import CHECKPOINTING, MICROBATCH_SPLITS, MIXED_PRECISION, Factor
from memfit.advice._failure import Failure, ModelInfo, failure_fixes
from memfit.advice._fix import Change, Fix, How, covers, rank
from memfit.advice._messages import (
    StepSettings,
    does_not_fit_message,
    optimizer_step_advice,
    smaller_step_advice,
)

__all__ = [
    "CHECKPOINTING",
    "GC_FRACTION",
    "MICROBATCH_SPLITS",
    "MIN_SAVING_BYTES",
    "MIN_SAVING_FRACTION",
    "MIXED_PRECISION",
    "AllocatorCandidate",
    "Change",
    "Factor",
    "Failure",
    "Fix",
    "How",
    "ModelInfo",
    "StepSettings",
    "WhatIf",
    "alloc_conf_how",
    "alloc_conf_text",
    "allocator_candidates",
    "covers",
    "does_not_fit_message",
    "failure_fixes",
    "optimizer_step_advice",
    "rank",
    "recommend_allocator",
    "smaller_step_advice",
    "streamable_configs",
]
