"""The host of a real GPU, where techniques keep what they move off it (``Place``)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

__all__ = ["GpuPlace"]


class GpuPlace:
    """The host of a real GPU: pinned CPU memory, copies waited for on the current stream."""

    def host_empty_like(self, t: torch.Tensor) -> torch.Tensor:
        return torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=True)

    def on_host(self) -> AbstractContextManager[Any]:
        return nullcontext()

    def synchronize(self) -> None:
        torch.cuda.current_stream().synchronize()

    def copies(self, words: Callable[[int], str]) -> None:
        """None: a real GPU runs the copies."""
        return None
