"""Trace a workload on meta tensors into allocation events (see ``_tracer``)."""

from memfit.trace._batch_fit import fit_batch_model, same_trace
from memfit.trace._batch_model import MIN_BATCH, BatchModel, BatchRefusal
from memfit.trace._batch_traces import BatchTraces
from memfit.trace._compiled import CompileGuard
from memfit.trace._conv_probe import ProbeRun, probe_unanswered
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
    "MIN_BATCH",
    "BatchModel",
    "BatchRefusal",
    "BatchTraces",
    "CompileGuard",
    "Op",
    "PhaseCost",
    "ProbeRun",
    "StepCosts",
    "Trace",
    "fit_batch_model",
    "is_copy",
    "mem_family",
    "probe_unanswered",
    "same_trace",
    "trace_workload",
]
