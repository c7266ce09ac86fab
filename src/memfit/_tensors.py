"""Facts about a tensor's layout that several layers ask."""

from __future__ import annotations

import torch

__all__ = ["is_dense"]


def is_dense(t: torch.Tensor) -> bool:
    """Whether ``t``'s elements fill one block of memory once each, in any order of its
    dimensions: a copy of its storage span is a copy of it, and CUDA's elementwise kernels
    can walk it as one flat array."""
    expected = 1
    for size, stride in sorted(zip(t.shape, t.stride(), strict=True), key=lambda d: d[1]):
        if size == 1:
            continue
        if stride != expected:
            return False
        expected *= size
    return True
