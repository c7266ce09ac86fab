"""What each phase of a traced step asks of the GPU's arithmetic and memory: the inputs of a
step-time model (issue 13), counted while the trace runs, when asked for.

Per op the GPU would launch (views launch nothing): its floating-point operations, from
PyTorch's own formulas (``torch.utils.flop_counter``: matrix products, convolutions, attention),
split by the unit that runs them; the bytes it reads and writes (its tensor inputs and outputs);
and one kernel. The units: tensor cores for half precision, and for float32 convolutions (cuDNN
allows TF32 by default); CUDA cores for float32 matrix products (PyTorch does not allow TF32 for
them by default). A model of step time weighs these with rates measured on the GPU
(``benchmarks/step_time_fit.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

__all__ = ["PhaseCost", "StepCosts"]

_CONVOLUTIONS = {"convolution", "_convolution", "cudnn_convolution", "convolution_backward"}
_HALF = (torch.float16, torch.bfloat16)


@dataclass
class PhaseCost:
    """One phase's totals."""

    tensor_core_flops: int = 0
    fp32_flops: int = 0  # float32 matrix products on CUDA cores
    bytes: int = 0
    kernels: int = 0

    def add(self, other: PhaseCost) -> None:
        self.tensor_core_flops += other.tensor_core_flops
        self.fp32_flops += other.fp32_flops
        self.bytes += other.bytes
        self.kernels += other.kernels


@dataclass
class StepCosts:
    """Costs by phase name (``step2.backward``...), as the trace's phases are named."""

    phases: dict[str, PhaseCost] = field(default_factory=dict)

    def record(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, phase: str
    ) -> None:
        """Count one op of ``phase`` (called from the trace's dispatch, outputs known)."""
        if getattr(func, "is_view", False):
            return
        cost = self.phases.setdefault(phase, PhaseCost())
        cost.kernels += 1
        cost.bytes += _nbytes(tree_leaves((args, kwargs))) + _nbytes(tree_leaves(out))
        formula = _formula(func)
        if formula is None:
            return
        flops = int(formula(*args, **kwargs, out_val=out))
        dtype = _first_dtype(args)
        name = func.overloadpacket.__name__
        if dtype in _HALF or (dtype == torch.float32 and name in _CONVOLUTIONS):
            cost.tensor_core_flops += flops
        else:
            cost.fp32_flops += flops

    def copy(self, names: Iterable[tuple[str, str]]) -> None:
        """Add the costs of each phase ``(source, target)`` again under ``target`` (a later
        step's passes copied from step 1's events)."""
        for source, target in set(names):
            cost = self.phases.get(source)
            if cost is not None:
                self.phases.setdefault(target, PhaseCost()).add(cost)

    def total(self, prefix: str = "") -> PhaseCost:
        """The sum over the phases whose names start with ``prefix`` (``step2.``: one step)."""
        out = PhaseCost()
        for name, cost in self.phases.items():
            if name.startswith(prefix):
                out.add(cost)
        return out


def _formula(func: Any) -> Any:
    from torch.utils.flop_counter import flop_registry

    packet = getattr(func, "overloadpacket", None)
    return flop_registry.get(packet) if packet is not None else None


def _nbytes(items: Iterable[Any]) -> int:
    return sum(t.numel() * t.element_size() for t in items if isinstance(t, torch.Tensor))


def _first_dtype(args: tuple[Any, ...]) -> torch.dtype | None:
    for a in args:
        if isinstance(a, torch.Tensor):
            return a.dtype
    return None
