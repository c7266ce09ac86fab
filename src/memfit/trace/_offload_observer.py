"""What a trace keeps of activation offload's copies (``workload._offload``), which meta tensors
cannot make: each copy as an op of the step (its bytes, for the step-time model's copy lane),
the side stream's events and the compute stream's waits on them, and the buffers the backward
brings saved tensors back into, as activations."""

from __future__ import annotations

import torch

from memfit._events import Category
from memfit.trace._recorder import Recorder

__all__ = ["OffloadTrace"]


class OffloadTrace:
    """An :class:`~memfit.workload.OffloadObserver` that records into a trace's recorder."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def _op(self, kind: str, number: int, nbytes: int) -> None:
        rec = self.recorder
        if rec.costs is not None and not rec.suspended:
            rec.costs.record_copy(kind, number, nbytes, rec.phase)

    def copied(self, direction: str, nbytes: int) -> None:
        self._op(direction, 0, nbytes)

    def marked(self, event: int) -> None:
        self._op("copy_mark", event, 0)

    def waited(self, event: int) -> None:
        self._op("copy_wait", event, 0)

    def fetched(self, t: torch.Tensor) -> None:
        self.recorder.set_category(t, Category.ACTIVATION, force=True)
