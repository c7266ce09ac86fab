"""What the guard records about each out-of-memory error it handled, and the memory it saw."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Literal

import torch

from memfit._units import format_bytes

__all__ = ["Action", "MemoryFacts", "MicrobatchIncident", "Phase", "logger", "memory_facts"]

logger = logging.getLogger("memfit.guard")

Phase = Literal["forward", "backward", "optimizer"]
Action = Literal["split", "restore", "fatal"]


@dataclass(frozen=True, slots=True)
class MemoryFacts:
    """CUDA memory of the model's device at the failure, in bytes, before the guard freed it.

    ``persistent`` is parameters, gradients and optimizer state on that device; the rest of
    ``allocated`` is the step's working set (activations, saved tensors, temporaries).
    """

    device: str
    allocated: int
    reserved: int
    total: int
    persistent: int

    @property
    def working_set(self) -> int:
        return max(self.allocated - self.persistent, 0)

    def text(self) -> str:
        return (
            f"{format_bytes(self.allocated)} allocated and {format_bytes(self.reserved)} reserved "
            f"of {format_bytes(self.total)} on {self.device}; parameters, gradients and optimizer "
            f"state hold {format_bytes(self.persistent)}, the step's working set "
            f"{format_bytes(self.working_set)}"
        )


@dataclass(frozen=True, slots=True)
class MicrobatchIncident:
    """One out-of-memory error handled (or given up on) by :class:`memfit.AutoMicrobatch`.

    ``step`` counts the guard's calls before this one (0 for the first). ``phase`` is where the
    error happened; with DDP it is the latest phase any rank reached, and ``here`` says whether
    this process was the one that ran out. ``microbatch_before`` is the largest micro-batch the
    failed attempt used (samples); ``microbatch_after`` the one the retry uses (``None`` when
    ``action`` is ``"fatal"``). ``action``: ``"split"`` (retry with smaller micro-batches),
    ``"restore"`` (an attempt to grow back failed; return to the size that worked) or
    ``"fatal"`` (nothing left to split, or the optimizer step: the guard raised
    :class:`memfit.UnrecoverableOOMError`). ``memory`` is ``None`` off CUDA.
    """

    step: int
    phase: Phase
    here: bool
    batch_size: int
    microbatch_before: int
    microbatch_after: int | None
    action: Action
    memory: MemoryFacts | None
    message: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def text(self) -> str:
        where = self.phase if self.here else f"{self.phase} (on another rank)"
        if self.action == "fatal":
            what = "cannot continue"
        else:
            verb = "returning to" if self.action == "restore" else "retrying with"
            what = f"{verb} micro-batches of {self.microbatch_after}"
        memory = f"; {self.memory.text()}" if self.memory is not None else ""
        return (
            f"CUDA out of memory in the {where} at step {self.step} (batch {self.batch_size}, "
            f"micro-batches of {self.microbatch_before}): {what}{memory}"
        )


def _tensor_bytes(tensors: list[torch.Tensor], device: torch.device) -> int:
    seen: set[int] = set()
    total = 0
    for t in tensors:
        if t.device != device or id(t) in seen:
            continue
        seen.add(id(t))
        total += t.untyped_storage().nbytes()
    return total


def memory_facts(
    params: list[torch.nn.Parameter], optimizer: torch.optim.Optimizer | None
) -> MemoryFacts | None:
    """Read the CUDA memory of the parameters' device; ``None`` off CUDA or before CUDA init."""
    device = next((p.device for p in params if p.device.type == "cuda"), None)
    if device is None or not torch.cuda.is_initialized():
        return None
    tensors: list[torch.Tensor] = list(params)
    tensors += [p.grad for p in params if p.grad is not None]
    if optimizer is not None:
        for state in optimizer.state.values():
            tensors += [v for v in state.values() if isinstance(v, torch.Tensor)]
    return MemoryFacts(
        device=str(device),
        allocated=torch.cuda.memory_allocated(device),
        reserved=torch.cuda.memory_reserved(device),
        total=torch.cuda.get_device_properties(device).total_memory,
        persistent=_tensor_bytes(tensors, device),
    )
