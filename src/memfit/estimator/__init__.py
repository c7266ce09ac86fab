"""The estimate layer: trace a workload, replay it through the allocator emulator, and report
the peaks, the breakdown at the peak, the timeline and a verdict against a GPU.

The result types (:class:`Estimate` and its parts) import without torch, so that renderers and
``memfit watch`` stay fast to start; the rest loads torch on first use.
"""

import typing as _typing

from memfit._lazy import lazy_attributes as _lazy_attributes
from memfit.estimator._gc import gc_paused
from memfit.estimator._quiet import quiet_libraries
from memfit.estimator._result import Estimate, Timeline, Verdict, WorkloadSummary
from memfit.estimator._versions import Versions, installed_versions

if _typing.TYPE_CHECKING:
    from memfit.estimator._batch_estimates import BatchEstimates
    from memfit.estimator._estimate import (
        as_workload,
        estimate,
        estimate_workload,
        module_group,
    )
    from memfit.estimator._measure import Measurement, measure
    from memfit.estimator._pressure import (
        frees_by_step,
        least_capacity,
        released_by_step,
        retries_by_step,
        retries_within,
        runs_within,
    )
    from memfit.estimator._probe_convs import ConvolutionProbes, probe_convolutions
    from memfit.estimator._serving import (
        ServingCapacity,
        ServingPoint,
        kv_cache_bytes,
        serving_capacity,
    )
    from memfit.estimator._validate import Validation, local_gpu, validate

_LAZY = {
    "ConvolutionProbes": "_probe_convs",
    "probe_convolutions": "_probe_convs",
    "ServingCapacity": "_serving",
    "ServingPoint": "_serving",
    "kv_cache_bytes": "_serving",
    "serving_capacity": "_serving",
    "BatchEstimates": "_batch_estimates",
    "as_workload": "_estimate",
    "estimate": "_estimate",
    "estimate_workload": "_estimate",
    "module_group": "_estimate",
    "Measurement": "_measure",
    "measure": "_measure",
    "frees_by_step": "_pressure",
    "least_capacity": "_pressure",
    "released_by_step": "_pressure",
    "retries_by_step": "_pressure",
    "retries_within": "_pressure",
    "runs_within": "_pressure",
    "Validation": "_validate",
    "local_gpu": "_validate",
    "validate": "_validate",
}


__getattr__, __dir__ = _lazy_attributes(__name__, _LAZY, globals(), gc_paused)

__all__ = [
    "BatchEstimates",
    "ConvolutionProbes",
    "Estimate",
    "Measurement",
    "ServingCapacity",
    "ServingPoint",
    "Timeline",
    "Validation",
    "Verdict",
    "Versions",
    "WorkloadSummary",
    "as_workload",
    "estimate",
    "estimate_workload",
    "frees_by_step",
    "gc_paused",
    "installed_versions",
    "kv_cache_bytes",
    "least_capacity",
    "local_gpu",
    "measure",
    "module_group",
    "probe_convolutions",
    "quiet_libraries",
    "released_by_step",
    "retries_by_step",
    "retries_within",
    "runs_within",
    "serving_capacity",
    "validate",
]
