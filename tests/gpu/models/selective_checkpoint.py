"""An MLP of residual blocks, each checkpointed selectively (PyTorch's
``create_selective_checkpoint_contexts``: matrix products saved, the rest recomputed), as
torchtitan checkpoints its blocks: ``selective_checkpoint.py:make_model`` (the GPU tests)."""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

_SAVED = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default}


def _policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
    return CheckpointPolicy.MUST_SAVE if op in _SAVED else CheckpointPolicy.PREFER_RECOMPUTE


class Block(nn.Module):
    def __init__(self, width: int = 1024) -> None:
        super().__init__()
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(nn.functional.gelu(self.up(x)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        context = functools.partial(create_selective_checkpoint_contexts, _policy)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False, context_fn=context)
        return x.float().pow(2).mean()


def make_model() -> nn.Module:
    return Net()


def make_batch(batch_size: int, seq_len: int | None) -> torch.Tensor:
    return torch.randn(batch_size, seq_len or 512, 1024)
