"""Trace a workload on meta tensors into allocation events (see ``_tracer``)."""

from memfit.trace._compiled import CompileGuard
from memfit.trace._tracer import Trace, trace_workload

__all__ = ["CompileGuard", "Trace", "trace_workload"]
