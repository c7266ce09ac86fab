"""What a trace keeps of the copies between the GPU and the host that a technique issues on a
side stream (activation offload's, ``memfit.technique.offload``), which fake tensors cannot make:
each copy as an op of the step (its bytes, for the step-time model's copy lane), the side
stream's events and the compute stream's waits on them, and the buffers copies back land in,
as activations."""

from __future__ import annotations

from collections.abc import Callable

import torch

from memfit._events import Category
from memfit._host_memory import pinned_size
from memfit.trace._recorder import Recorder

__all__ = ["CopyLane"]


class CopyLane:
    """A :class:`~memfit.technique.CopyObserver` that records into a trace's recorder, and the
    pinned host memory the copies held (``words`` of its most at once is its note)."""

    def __init__(self, recorder: Recorder, words: Callable[[int], str]) -> None:
        self.recorder = recorder
        self.words = words
        self.live = self.most = 0  # pinned host bytes held, as allocated: now and at most

    def note(self) -> str:
        """What the copies asked of the host, for the estimate's notes."""
        return self.words(self.most)

    def _op(self, kind: str, number: int, nbytes: int) -> None:
        rec = self.recorder
        if rec.costs is not None and not rec.suspended:
            rec.costs.record_copy(kind, number, nbytes, rec.phase)

    def copied(self, direction: str, nbytes: int) -> None:
        self._op(direction, 0, nbytes)
        # a host copy is held from its forward's copy to its backward's (about: until autograd
        # has used it), rounded up as the pinned allocator rounds it
        rounded = pinned_size(nbytes)
        self.live += rounded if direction == "d2h" else -rounded
        self.most = max(self.most, self.live)

    def marked(self, event: int) -> None:
        self._op("copy_mark", event, 0)

    def waited(self, event: int) -> None:
        self._op("copy_wait", event, 0)

    def fetched(self, t: torch.Tensor) -> None:
        self.recorder.set_category(t, Category.ACTIVATION, force=True)
