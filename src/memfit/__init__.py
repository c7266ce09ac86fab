"""memfit: know GPU memory before you run, fit it on purpose, watch it while it runs.

``memfit.estimate(...)`` predicts the peak memory of a PyTorch step on the CPU. Everything not
listed in ``__all__`` is private.
"""

from memfit._errors import (
    InvalidInputError,
    MemfitError,
    MissingExtraError,
    NoGPUError,
    TraceError,
    UnknownModelError,
)
from memfit._estimate import estimate
from memfit._events import Category
from memfit._gpus import GPU, resolve_gpu
from memfit._result import Estimate, Timeline, Verdict, WorkloadSummary
from memfit._units import format_bytes, parse_size
from memfit.oom import oom_report

__version__ = "0.1.0"

__all__ = [
    "GPU",
    "Category",
    "Estimate",
    "InvalidInputError",
    "MemfitError",
    "MissingExtraError",
    "NoGPUError",
    "Timeline",
    "TraceError",
    "UnknownModelError",
    "Verdict",
    "WorkloadSummary",
    "__version__",
    "estimate",
    "format_bytes",
    "oom_report",
    "parse_size",
    "resolve_gpu",
]
