"""Batches for the data-parallel guard tests: the same on every process, one per rank a step."""

from __future__ import annotations

import torch


def rank_batches(sizes: list[tuple[int, ...]]) -> list[list[dict[str, torch.Tensor]]]:
    """``out[step][rank]``: ``sizes[step][rank]`` samples of 6 float64 features and a class."""
    g = torch.Generator().manual_seed(7)
    return [
        [
            {
                "x": torch.randn(n, 6, generator=g, dtype=torch.float64),
                "y": torch.randint(3, (n,), generator=g),
            }
            for n in step
        ]
        for step in sizes
    ]
