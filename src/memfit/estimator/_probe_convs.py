"""``memfit.probe_convolutions``: measure, on this machine's GPU, the cuDNN workspaces of a
workload's convolutions that memfit's table does not hold, and keep them for later estimates.

Why: a convolution's workspace is the engine cuDNN picks, which only the GPU tells, and memfit
gives a convolution it has not measured the workspace 95% of the measured ones stay under. On
21 models new to memfit (an H100, 2026-12-07) such estimates ranged from 1.8% under the peak
reserved to 65% over it; with the same convolutions probed first, all 32 workloads were within
0.6% (``benchmarks/results/2026-12-07-h100-zoo-new-families``). The probe runs each missing
convolution alone, at the workload's batch, a few milliseconds each; estimates of GPUs of the
same compute capability read the result from then on (``memfit.trace._cudnn``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from memfit._errors import InvalidInputError, NoGPUError
from memfit._gpus import GPU
from memfit.estimator._estimate import as_workload
from memfit.estimator._gc import gc_frozen
from memfit.estimator._quiet import quiet_libraries
from memfit.workload import WorkloadOptions

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["ConvolutionProbes", "probe_convolutions"]


@dataclass(frozen=True)
class ConvolutionProbes:
    """What a probe found and measured: the convolution configurations the step runs that the
    table did not answer (``missing``), those measured now (``probed``), those that could not
    run on this GPU (``failed``: their table keys and why), where they were kept, on which GPU,
    and how long it took."""

    missing: int
    probed: int
    failed: tuple[str, ...]
    path: str
    gpu: str
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "failed": list(self.failed)}


def probe_convolutions(
    model: Any,
    batch: Any = None,
    *,
    progress: Callable[[int, int], None] | None = None,
    **options: Unpack[WorkloadOptions],
) -> ConvolutionProbes:
    """Probe, on this machine's CUDA GPU, the convolutions of the workload that memfit's
    cuDNN table does not answer, and keep their workspaces for this machine's later estimates.

    Takes what :func:`memfit.estimate` takes; a ``gpu`` given must be of this GPU's compute
    capability (probes measured on one architecture do not stand for another's). ``progress``
    is told (done, total) after each configuration. An interrupt keeps what was probed.
    """
    import torch

    from memfit.trace import probe_unanswered

    if not torch.cuda.is_available():
        raise NoGPUError(
            "memfit probes convolutions on a GPU, and no CUDA GPU is available here. Run it on "
            "a machine with one (its results serve every later estimate for GPUs of that "
            "architecture); memfit estimate needs none."
        )
    start = time.perf_counter()
    local = _local_gpu()
    with quiet_libraries():
        workload = as_workload(model, batch, options)
    target = workload.gpu or local
    if target.sm != local.sm:
        raise InvalidInputError(
            f"gpu={target.name!r} has compute capability {target.sm / 10:.1f}, and this "
            f"machine's {local.name} has {local.sm / 10:.1f}: cuDNN picks other engines on "
            "another architecture, so probes made here would not stand for it. Drop gpu=, or "
            "probe on a GPU of that architecture."
        )
    with quiet_libraries(), gc_frozen():
        run = probe_unanswered(workload, target, local.sm, progress)
    return ConvolutionProbes(
        missing=run.missing,
        probed=run.probed,
        failed=run.failed,
        path=str(run.path),
        gpu=local.name,
        seconds=round(time.perf_counter() - start, 2),
    )


def _local_gpu() -> GPU:
    from memfit.estimator._validate import local_gpu

    return local_gpu()
