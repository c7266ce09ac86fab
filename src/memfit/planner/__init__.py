"""Advice: which changes could make a step fit, what each saves, and their ranking.

The one home of the what-if candidates and their wording, used by ``memfit.snapshot`` (which
allocator settings to replay, which to recommend), ``memfit.oom`` (the fixes of an
out-of-memory report), ``memfit.runtime`` (the advice in its errors) and the planner.

* :class:`Fix` is one way to avoid running out of memory: its expected saving in bytes and
  where that number comes from, the :class:`Change` to a setting a planner can apply, how a
  person makes it, and its cost; :func:`rank` orders fixes by saving.
* :func:`failure_fixes` ranks the fixes of a :class:`Failure` (the facts at an out-of-memory
  error), scaling the working set with the measured :class:`Factor` s.
* :func:`allocator_candidates` are the allocator settings worth replaying on a trace; each
  replay's saving is a :class:`WhatIf`, and :func:`recommend_allocator` picks one worth
  changing for.

This layer sits above the estimator and imports none of snapshot, oom, runtime or report. It is
named ``planner``, not ``plan``, because ``memfit.plan`` is to be the planner's public function
(a subpackage of that name would replace it as an attribute of ``memfit`` once imported).
"""

from __future__ import annotations

import typing as _typing

from memfit._lazy import lazy_attributes as _lazy_attributes
from memfit.planner._allocator import (
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
from memfit.planner._factors import CHECKPOINTING, MICROBATCH_SPLITS, MIXED_PRECISION, Factor
from memfit.planner._failure import Failure, ModelInfo, failure_fixes
from memfit.planner._fix import Change, Fix, How, covers, rank
from memfit.planner._messages import (
    StepSettings,
    does_not_fit_message,
    optimizer_step_advice,
    smaller_step_advice,
)
from memfit.planner._plan_result import Candidate, Evaluated, Plan, offload_words
from memfit.planner._target import plan_target

if _typing.TYPE_CHECKING:
    from memfit.planner._model_key import model_key, unwrapped_model
    from memfit.planner._plan import DEFAULT_MARGIN, EXPANDABLE, plan
    from memfit.planner._search import candidate_costs, step_style, step_time_of
    from memfit.planner._step_time import Calibration, StepTime, calibration_for, step_time

# these need torch: loaded on first use, so that the advice above imports without it
_LAZY = {
    "model_key": "_model_key",
    "unwrapped_model": "_model_key",
    "DEFAULT_MARGIN": "_plan",
    "EXPANDABLE": "_plan",
    "plan": "_plan",
    "candidate_costs": "_search",
    "step_style": "_search",
    "step_time_of": "_search",
    "Calibration": "_step_time",
    "StepTime": "_step_time",
    "calibration_for": "_step_time",
    "step_time": "_step_time",
}


__getattr__, __dir__ = _lazy_attributes(__name__, _LAZY, globals())

__all__ = [
    "CHECKPOINTING",
    "DEFAULT_MARGIN",
    "EXPANDABLE",
    "GC_FRACTION",
    "MICROBATCH_SPLITS",
    "MIN_SAVING_BYTES",
    "MIN_SAVING_FRACTION",
    "MIXED_PRECISION",
    "AllocatorCandidate",
    "Calibration",
    "Candidate",
    "Change",
    "Evaluated",
    "Factor",
    "Failure",
    "Fix",
    "How",
    "ModelInfo",
    "Plan",
    "StepSettings",
    "StepTime",
    "WhatIf",
    "alloc_conf_how",
    "alloc_conf_text",
    "allocator_candidates",
    "calibration_for",
    "candidate_costs",
    "covers",
    "does_not_fit_message",
    "failure_fixes",
    "model_key",
    "offload_words",
    "optimizer_step_advice",
    "plan",
    "plan_target",
    "rank",
    "recommend_allocator",
    "smaller_step_advice",
    "step_style",
    "step_time",
    "step_time_of",
    "streamable_configs",
    "unwrapped_model",
]
