"""Trace a workload on meta tensors into allocation events (see ``_tracer``)."""

from memfit.trace._compiled import CompileGuard
from memfit.trace._costs import MEM_FAMILIES, Op, PhaseCost, StepCosts
from memfit.trace._tracer import Trace, trace_workload

__all__ = [
    "MEM_FAMILIES",
    "CompileGuard",
    "Op",
    "PhaseCost",
    "StepCosts",
    "Trace",
    "trace_workload",
]
