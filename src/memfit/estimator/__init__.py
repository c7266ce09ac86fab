"""The estimate layer: trace a workload, replay it through the allocator emulator, and report
the peaks, the breakdown at the peak, the timeline and a verdict against a GPU."""

from memfit.estimator._estimate import estimate, estimate_workload, module_group
from memfit.estimator._measure import Measurement, measure
from memfit.estimator._pressure import least_capacity, retries_within, runs_within
from memfit.estimator._result import Estimate, Timeline, Verdict, WorkloadSummary

__all__ = [
    "Estimate",
    "Measurement",
    "Timeline",
    "Verdict",
    "WorkloadSummary",
    "estimate",
    "estimate_workload",
    "least_capacity",
    "measure",
    "module_group",
    "retries_within",
    "runs_within",
]
