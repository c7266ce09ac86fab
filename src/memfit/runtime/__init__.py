"""Runtime guards for a training job: survive the one batch that does not fit, and run the step
a plan chose (``apply``, ``fit``, ``unapply``).

``AutoMicrobatch`` wraps a training step; on a CUDA out-of-memory error it releases the failed
attempt, splits the batch into micro-batches and accumulates gradients so the update equals the
unsplit one. Runtime is an outer layer: it may use estimate, allocator and oom; inner layers never
import it.
"""

from memfit.runtime._apply import apply, unapply
from memfit.runtime._batch_size import BatchSizeResult, find_batch_size
from memfit.runtime._fit import fit
from memfit.runtime._incident import MicrobatchIncident
from memfit.runtime._leak import LeakDetector, LeakReport
from memfit.runtime._microbatch import AutoMicrobatch, LossFn, auto_microbatch
from memfit.runtime._offload import offload_activations
from memfit.runtime._planned_step import PlannedStep
from memfit.runtime._simulate import InjectOOM
from memfit.runtime._split import batch_size, split_batch

__all__ = [
    "AutoMicrobatch",
    "BatchSizeResult",
    "InjectOOM",
    "LeakDetector",
    "LeakReport",
    "LossFn",
    "MicrobatchIncident",
    "PlannedStep",
    "apply",
    "auto_microbatch",
    "batch_size",
    "find_batch_size",
    "fit",
    "offload_activations",
    "split_batch",
    "unapply",
]
