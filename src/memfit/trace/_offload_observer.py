"""What a trace keeps of activation offload's copies (``memfit.technique.offload``), which
meta tensors cannot make: each copy as an op of the step (its bytes, for the step-time model's
copy lane), the side stream's events and the compute stream's waits on them, and the buffers
the backward brings saved tensors back into, as activations."""

from __future__ import annotations

import torch

from memfit._events import Category
from memfit._host_memory import pinned_size
from memfit._units import format_bytes
from memfit.trace._recorder import Recorder

__all__ = ["OffloadTrace"]


class OffloadTrace:
    """An :class:`~memfit.workload.OffloadObserver` that records into a trace's recorder."""

    def __init__(
        self, recorder: Recorder, offloaded: int, blocks: int, *, checkpointed: int = 0
    ) -> None:
        self.recorder = recorder
        self.offloaded, self.blocks = offloaded, blocks  # how many blocks of how many
        self.checkpointed = checkpointed  # of the offloaded: checkpointed (their inputs only)
        self.live = self.most = 0  # pinned host bytes held, as allocated: now and at most

    def note(self) -> str:
        """What the offload asks of the host, for the estimate's notes."""
        others = self.offloaded - self.checkpointed
        what = " and ".join(
            part
            for part in (
                f"the inputs of {self.checkpointed} checkpointed blocks"
                if self.checkpointed
                else "",
                f"what {others} {'other ' if self.checkpointed else ''}blocks save"
                if others
                else "",
            )
            if part
        )
        return (
            f"activation offload: {what} (of {self.blocks} blocks) wait in "
            f"pinned host memory between forward and backward, {format_bytes(self.most)} of it "
            "at once (PyTorch's pinned allocator rounds each tensor up to a power of two); the "
            "copies run on a side stream"
        )

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
