"""The planner: the fastest configuration that fits a budget, found by estimation.

:func:`plan` searches micro-batch size, gradient accumulation, precision, checkpointing,
offload and the allocator's settings, estimating each candidate's memory with the estimator
and its step time with the step-time model calibrated on the GPU (:class:`Calibration`,
:func:`step_time`); its result is a :class:`Plan` of :class:`Candidate` s. What a change saves
and how it is said live in ``memfit.advice``, which the planner uses like the other layers.

It is named ``planner``, not ``plan``, because ``memfit.plan`` is the planner's public function
(a subpackage of that name would replace it as an attribute of ``memfit`` once imported).
"""

from __future__ import annotations

import typing as _typing

from memfit._lazy import lazy_attributes as _lazy_attributes
from memfit.planner._plan_result import Candidate, Evaluated, Plan, offload_words
from memfit.planner._target import plan_target

if _typing.TYPE_CHECKING:
    from memfit.planner._model_key import model_key, unwrapped_model
    from memfit.planner._plan import DEFAULT_MARGIN, EXPANDABLE, PlanOptions, plan
    from memfit.planner._search import candidate_costs, step_style, step_time_of
    from memfit.planner._step_time import Calibration, StepTime, calibration_for, step_time

# these need torch: loaded on first use, so that the names above import without it
_LAZY = {
    "model_key": "_model_key",
    "unwrapped_model": "_model_key",
    "DEFAULT_MARGIN": "_plan",
    "EXPANDABLE": "_plan",
    "plan": "_plan",
    "PlanOptions": "_plan",
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
    "DEFAULT_MARGIN",
    "EXPANDABLE",
    "Calibration",
    "Candidate",
    "Evaluated",
    "Plan",
    "PlanOptions",
    "StepTime",
    "calibration_for",
    "candidate_costs",
    "model_key",
    "offload_words",
    "plan",
    "plan_target",
    "step_style",
    "step_time",
    "step_time_of",
    "unwrapped_model",
]
