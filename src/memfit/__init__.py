"""memfit: know GPU memory before you run, fit it on purpose, watch it while it runs.

``memfit.estimate(...)`` predicts the peak memory of a PyTorch step on the CPU. Everything not
listed in ``__all__`` is private.

Names that need torch are imported on first use, so that ``import memfit`` (and ``memfit
watch``, which never needs torch) starts fast.
"""

import typing as _typing

from memfit import _display
from memfit._errors import (
    DoesNotFitError,
    HostMemoryError,
    InvalidInputError,
    MemfitError,
    MissingExtraError,
    NoGPUError,
    TraceError,
    UnknownModelError,
    UnrecoverableOOMError,
    UnsupportedWorkloadError,
    UserCodeError,
)
from memfit._gpus import GPU, resolve_gpu
from memfit._lazy import lazy_attributes as _lazy_attributes
from memfit._units import format_bytes, parse_size

if _typing.TYPE_CHECKING:
    import os as _os

    from memfit._events import Category
    from memfit.estimator import (
        Estimate,
        ServingCapacity,
        Timeline,
        Validation,
        Verdict,
        WorkloadSummary,
        estimate,
        probe_convolutions,
        serving_capacity,
        validate,
    )
    from memfit.monitor import configure, publish, stats
    from memfit.oom import OOMHook
    from memfit.planner import Plan, plan
    from memfit.runtime import (
        AutoMicrobatch,
        BatchSizeResult,
        LeakDetector,
        LeakReport,
        MicrobatchIncident,
        PlannedStep,
        apply,
        auto_microbatch,
        find_batch_size,
        fit,
        offload_activations,
        unapply,
    )
    from memfit.technique.offload import ActivationOffload
    from memfit.workload import Workload, make_workload

__version__ = "0.1.0"

_LAZY = {
    "estimate": "memfit.estimator",
    "Category": "memfit._events",
    "Estimate": "memfit.estimator",
    "Timeline": "memfit.estimator",
    "Verdict": "memfit.estimator",
    "WorkloadSummary": "memfit.estimator",
    "Validation": "memfit.estimator",
    "validate": "memfit.estimator",
    "probe_convolutions": "memfit.estimator",
    "ServingCapacity": "memfit.estimator",
    "serving_capacity": "memfit.estimator",
    "Workload": "memfit.workload",
    "make_workload": "memfit.workload",
    "publish": "memfit.monitor",
    "configure": "memfit.monitor",
    "stats": "memfit.monitor",
    "AutoMicrobatch": "memfit.runtime",
    "BatchSizeResult": "memfit.runtime",
    "LeakDetector": "memfit.runtime",
    "LeakReport": "memfit.runtime",
    "MicrobatchIncident": "memfit.runtime",
    "auto_microbatch": "memfit.runtime",
    "find_batch_size": "memfit.runtime",
    "Plan": "memfit.planner",
    "plan": "memfit.planner",
    "PlannedStep": "memfit.runtime",
    "apply": "memfit.runtime",
    "fit": "memfit.runtime",
    "unapply": "memfit.runtime",
    "offload_activations": "memfit.runtime",
    "ActivationOffload": "memfit.technique.offload",
}


def oom_report(
    directory: "str | _os.PathLike[str]" = "memfit-oom",
    *,
    record_history: bool = True,
    max_entries: int | None = None,
    max_reports: int | None = None,
) -> "OOMHook":
    """Write a report into ``directory`` when this process runs out of CUDA memory:
    ``with memfit.oom_report("oom"): train()``, or for the whole process
    ``memfit.oom_report("oom")``.

    :func:`memfit.oom.oom_report` with the report's Markdown rendered by
    ``memfit.report.oom_markdown`` (oom sits below the report layer and renders nothing);
    its docstring has the detail. ``max_entries`` / ``max_reports``: ``None`` keeps its
    defaults.
    """
    from memfit.oom import oom_report as install
    from memfit.report import oom_markdown

    limits = {"max_entries": max_entries, "max_reports": max_reports}
    return install(
        directory,
        render=oom_markdown,
        record_history=record_history,
        **{k: v for k, v in limits.items() if v is not None},
    )


def _notebook_renderers() -> "_typing.Mapping[_display.HtmlKind, _display.HtmlRenderer]":
    """The HTML renderers of ``memfit.report``, for ``_repr_html_`` in a notebook: called on
    the first display, so that ``import memfit`` imports neither report nor torch (the data
    objects sit below report and may not import it: ``memfit._display``)."""
    from memfit.report import NOTEBOOK_RENDERERS

    return NOTEBOOK_RENDERERS


_display.set_html_source(_notebook_renderers)


__getattr__, __dir__ = _lazy_attributes(__name__, _LAZY, globals())

__all__ = [
    "GPU",
    "ActivationOffload",
    "AutoMicrobatch",
    "BatchSizeResult",
    "Category",
    "DoesNotFitError",
    "Estimate",
    "HostMemoryError",
    "InvalidInputError",
    "LeakDetector",
    "LeakReport",
    "MemfitError",
    "MicrobatchIncident",
    "MissingExtraError",
    "NoGPUError",
    "Plan",
    "PlannedStep",
    "ServingCapacity",
    "Timeline",
    "TraceError",
    "UnknownModelError",
    "UnrecoverableOOMError",
    "UnsupportedWorkloadError",
    "UserCodeError",
    "Validation",
    "Verdict",
    "Workload",
    "WorkloadSummary",
    "__version__",
    "apply",
    "auto_microbatch",
    "configure",
    "estimate",
    "find_batch_size",
    "fit",
    "format_bytes",
    "make_workload",
    "offload_activations",
    "oom_report",
    "parse_size",
    "plan",
    "probe_convolutions",
    "publish",
    "resolve_gpu",
    "serving_capacity",
    "stats",
    "unapply",
    "validate",
]
