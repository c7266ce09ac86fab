"""``memfit.validate``: estimate a workload, run it on this machine's GPU, and compare.

The run is the same step loop the trace runs (:func:`memfit.estimator.measure`), so the
differences are the estimator's alone.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memfit._display import html_repr
from memfit._errors import InvalidInputError, NoGPUError
from memfit._gpus import GPU
from memfit.allocator import ENV_VARS
from memfit.estimator._estimate import as_workload, estimate_workload
from memfit.estimator._measure import Measurement, measure
from memfit.estimator._result import Estimate
from memfit.workload import WorkloadOptions

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["Validation", "local_gpu", "validate"]


@dataclass(frozen=True)
class Validation:
    """An estimate beside the measurement of the same workload. Sizes are int bytes."""

    estimate: Estimate
    measured: Measurement

    def rows(self) -> list[tuple[str, int, int | None]]:
        """(what, estimated, measured) for each compared figure; measured None where NVML
        could not tell."""
        return [
            ("peak allocated", self.estimate.peak_allocated, self.measured.peak_allocated),
            ("peak reserved", self.estimate.peak_reserved, self.measured.peak_reserved),
            ("non-PyTorch (NVML - reserved)", self.estimate.non_pytorch, self.measured.context),
        ]

    @staticmethod
    def error(estimated: int, measured: int | None) -> float | None:
        """The relative error of ``estimated`` (0.01 is 1% high); None where not measured."""
        if not measured:
            return None
        return (estimated - measured) / measured

    def __repr__(self) -> str:
        """One line: the model, the GPU, and each figure estimated, measured and the error
        (``estimate`` and ``measured`` hold the rest)."""
        fields = [f"model={self.estimate.workload.model!r}", f"gpu={self.measured.gpu_name!r}"]
        for label, estimated, measured in self.rows()[:2]:
            error = self.error(estimated, measured)
            off = "" if error is None else f" ({error * 100:+.2f}%)"
            fields.append(f"{label.replace(' ', '_')}={estimated} vs measured {measured}{off}")
        return f"Validation({', '.join(fields)})"

    def _repr_html_(self) -> str | None:
        """The comparison as HTML where a notebook shows it (``memfit.report`` renders it,
        as ``memfit validate`` prints it)."""
        return html_repr("validation", self)

    def to_dict(self) -> dict[str, Any]:
        return {"estimate": self.estimate.to_dict(), "measured": self.measured.to_dict()}

    def to_json(self, *, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)


def local_gpu() -> GPU:
    """This machine's current CUDA device, as a target GPU (its whole memory)."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return GPU(props.name, props.total_memory, (props.major, props.minor))


def validate(model: Any, batch: Any = None, **options: Unpack[WorkloadOptions]) -> Validation:
    """Estimate a workload, run its steps on this machine's CUDA GPU, and return both.

    Takes what :func:`memfit.estimate` takes, except ``gpu`` (it is this machine's). An
    ``allocator_config`` is put in ``PYTORCH_CUDA_ALLOC_CONF`` before CUDA starts, so it applies
    to the rest of the process; once CUDA has started it can no longer change, and a different
    one is refused.
    """
    import torch

    if options.get("gpu") is not None:
        raise InvalidInputError(
            f"validate runs on this machine's GPU; gpu={options['gpu']!r} would be ignored. "
            "Drop it (memfit.estimate takes a target GPU)."
        )
    if not torch.cuda.is_available():
        raise NoGPUError(
            "memfit validate runs the workload on a GPU, and no CUDA GPU is available here. "
            "Use memfit estimate on machines without one."
        )
    workload = as_workload(model, batch, options)
    _apply_allocator_config(workload.allocator_text, torch.cuda.is_initialized())
    if workload.gpu is None:
        import dataclasses

        workload = dataclasses.replace(workload, gpu=local_gpu())
    estimate = estimate_workload(workload)
    measured, _ = measure(workload)
    return Validation(estimate, measured)


def _apply_allocator_config(text: str, cuda_started: bool) -> None:
    if not text:
        return
    current = next((os.environ[v] for v in ENV_VARS if v in os.environ), "")
    if cuda_started and current != text:
        raise InvalidInputError(
            f"CUDA is already initialised, so allocator_config={text!r} cannot take effect "
            f"(the allocator runs with {current or 'the defaults'!r}). Set "
            "PYTORCH_CUDA_ALLOC_CONF before the first CUDA call, or validate in a new process."
        )
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = text
