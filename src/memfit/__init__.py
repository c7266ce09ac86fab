"""memfit: know GPU memory before you run, fit it on purpose, watch it while it runs.

``memfit.estimate(...)`` predicts the peak memory of a PyTorch step on the CPU. Everything not
listed in ``__all__`` is private.

Names that need torch are imported on first use, so that ``import memfit`` (and ``memfit
watch``, which never needs torch) starts fast.
"""

import importlib as _importlib
import typing as _typing

from memfit._errors import (
    DoesNotFitError,
    InvalidInputError,
    MemfitError,
    MissingExtraError,
    NoGPUError,
    TraceError,
    UnknownModelError,
    UnrecoverableOOMError,
)
from memfit._gpus import GPU, resolve_gpu
from memfit._units import format_bytes, parse_size

if _typing.TYPE_CHECKING:
    from memfit._events import Category
    from memfit.estimator import Estimate, Timeline, Verdict, WorkloadSummary, estimate
    from memfit.monitor import publish
    from memfit.oom import oom_report
    from memfit.runtime import (
        AutoMicrobatch,
        BatchSizeResult,
        LeakDetector,
        LeakReport,
        MicrobatchIncident,
        auto_microbatch,
        find_batch_size,
    )

__version__ = "0.1.0"

_LAZY = {
    "estimate": "memfit.estimator",
    "Category": "memfit._events",
    "Estimate": "memfit.estimator",
    "Timeline": "memfit.estimator",
    "Verdict": "memfit.estimator",
    "WorkloadSummary": "memfit.estimator",
    "publish": "memfit.monitor",
    "oom_report": "memfit.oom",
    "AutoMicrobatch": "memfit.runtime",
    "BatchSizeResult": "memfit.runtime",
    "LeakDetector": "memfit.runtime",
    "LeakReport": "memfit.runtime",
    "MicrobatchIncident": "memfit.runtime",
    "auto_microbatch": "memfit.runtime",
    "find_batch_size": "memfit.runtime",
}


def __getattr__(name: str) -> _typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'memfit' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "GPU",
    "AutoMicrobatch",
    "BatchSizeResult",
    "Category",
    "DoesNotFitError",
    "Estimate",
    "InvalidInputError",
    "LeakDetector",
    "LeakReport",
    "MemfitError",
    "MicrobatchIncident",
    "MissingExtraError",
    "NoGPUError",
    "Timeline",
    "TraceError",
    "UnknownModelError",
    "UnrecoverableOOMError",
    "Verdict",
    "WorkloadSummary",
    "__version__",
    "auto_microbatch",
    "estimate",
    "find_batch_size",
    "format_bytes",
    "oom_report",
    "parse_size",
    "publish",
    "resolve_gpu",
]
