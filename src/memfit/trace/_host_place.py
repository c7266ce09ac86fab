"""The host beside a traced GPU (``memfit.technique.Place``): a technique's host tensors are fake
tensors the recorder does not count, and what runs on them allocates nothing on the GPU."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch

from memfit.trace._copy_lane import CopyLane
from memfit.trace._recorder import Recorder

__all__ = ["TracedHost"]


class TracedHost:
    """Host memory in a trace: made and used inside the recorder's ``host()``."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.lanes: list[CopyLane] = []  # the techniques' side-stream copies, for the notes

    def host_empty_like(self, t: torch.Tensor) -> torch.Tensor:
        with self.recorder.host():
            return torch.empty(t.shape, dtype=t.dtype, device=t.device)

    def on_host(self) -> AbstractContextManager[Any]:
        return self.recorder.host()

    def synchronize(self) -> None:
        """Nothing to wait for: a trace's copies are done when they are recorded."""

    def copies(self, words: Callable[[int], str]) -> CopyLane:
        """A lane that records a technique's side-stream copies into the trace."""
        lane = CopyLane(self.recorder, words)
        self.lanes.append(lane)
        return lane
