"""Helpers for the data-parallel guard tests: batches that are the same on every process, one per
rank a step, and the way a rank leaves its gloo job."""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist


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


def leave_job() -> None:
    """End this rank's process once every rank is done: a barrier, the group destroyed, then an
    exit that skips the interpreter's teardown. Gloo's threads, still referenced by FSDP2's mesh,
    can otherwise be destroyed unjoined at teardown and abort the process (seen once in CI)."""
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
