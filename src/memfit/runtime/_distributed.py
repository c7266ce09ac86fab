"""DDP for the guard: every rank retries together and the gradients are averaged once.

DDP's own gradient all-reduce runs inside ``backward()``. If one rank runs out of memory in the
middle of it, the others wait for buckets that never come, and the next collective of the
failing rank pairs with the wrong one: the job hangs. So under the guard no collective runs
inside a micro-batch. The guard calls the wrapped module directly (``ddp.module``: DDP's hooks,
and so its all-reduce, stay out of the way, as under ``no_sync()`` for every micro-batch), then:

1. all-reduces (MAX) a small tensor ``[failed phase, batch size]`` once per attempt: if any rank
   failed, every rank discards its attempt and retries with the same, smaller micro-batch size;
2. when no rank failed, averages the gradients itself as DDP's default hook does (divide by the
   world size, then all-reduce SUM), one asynchronous all-reduce per parameter, after a MAX
   all-reduce of which parameters have a gradient anywhere (so a parameter unused everywhere
   keeps ``grad=None``, as with DDP);
3. broadcasts the module's buffers from the group's first rank at the start of each step when
   ``broadcast_buffers`` is on, as DDP does before a synchronised forward.

The cost against plain DDP: the gradient all-reduce no longer overlaps the backward pass, and a
registered communication hook (e.g. fp16 compression) is not used.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

__all__ = ["Comm", "all_max", "unwrap"]


def all_max(values: list[int], device: torch.device, groups: list[Any]) -> list[int]:
    """The element-wise maximum of ``values`` over the ranks of ``groups``, reduced over each
    in turn (the dimensions of a mesh; ``None`` is the default group)."""
    t = torch.tensor(values, dtype=torch.int64, device=device)
    for group in groups:
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return [int(v) for v in t.tolist()]


class Comm:
    """The collectives the guard needs, on a DDP model's process group."""

    def __init__(self, ddp: DistributedDataParallel) -> None:
        self.group = ddp.process_group
        self.world = dist.get_world_size(self.group)
        self.source = dist.get_global_rank(self.group, 0)
        self.sync_buffers = bool(ddp.broadcast_buffers)
        self.module = ddp.module
        params = list(ddp.module.parameters())
        self.device = params[0].device if params else torch.device("cpu")

    def max_ints(self, values: list[int]) -> list[int]:
        """The element-wise maximum of ``values`` over the ranks."""
        return all_max(values, self.device, [self.group])

    def broadcast_buffers(self) -> None:
        if not self.sync_buffers:
            return
        for buffer in self.module.buffers():
            dist.broadcast(buffer, src=self.source, group=self.group)

    def average_gradients(self, params: list[torch.nn.Parameter]) -> None:
        have = self.max_ints([int(p.grad is not None) for p in params]) if params else []
        works = []
        for p, used in zip(params, have, strict=True):
            if not used:
                continue
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            p.grad.div_(self.world)
            works.append(dist.all_reduce(p.grad, group=self.group, async_op=True))
        for work in works:
            if work is not None:
                work.wait()


def unwrap(model: torch.nn.Module) -> tuple[torch.nn.Module, Comm | None]:
    """The module the guard runs, and the collectives when ``model`` is DDP on several ranks."""
    if isinstance(model, DistributedDataParallel):
        comm = Comm(model)
        return model.module, comm if comm.world > 1 else None
    return model, None
