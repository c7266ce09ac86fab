"""Trace a workload on meta tensors into allocation events (see ``_tracer``)."""

from memfit.trace._compiled import CompileGuard
from memfit.trace._costs import (
    COPY_KINDS,
    MEM_FAMILIES,
    Op,
    PhaseCost,
    StepCosts,
    is_copy,
    mem_family,
)
from memfit.trace._tracer import Trace, trace_workload

__all__ = [
    "COPY_KINDS",
    "MEM_FAMILIES",
    "CompileGuard",
    "Op",
    "PhaseCost",
    "StepCosts",
    "Trace",
    "is_copy",
    "mem_family",
    "trace_workload",
]
