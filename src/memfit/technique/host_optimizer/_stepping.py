"""The optimizer stepped on the host, as ZeRO-Offload does on one GPU: the optimizer's
parameters are host copies of the model's, so its states and its step's temporaries are host
memory; at each ``step()`` the gradients are copied to pinned host memory and freed on the GPU,
the optimizer steps on the host, and the updated values are copied back into the GPU's
parameters.

What the GPU keeps: the parameters, and the gradients until ``step()``. What it no longer
holds: the optimizer's states (AdamW's two, each a parameter's size) and its step's
temporaries (the foreach kernels' copies of whole parameter lists). What the host holds: a
copy of each trained parameter and of its gradient, both pinned (PyTorch's pinned-memory
allocator takes the next power of two of each), and the states.

The same code runs in a trace, on fake tensors whose host allocations are not recorded, and
on a real GPU (``memfit.technique.GpuPlace``). Gradients reach the host at ``step()``, not as
backward makes them: clipping, accumulation over micro-batches and ``zero_grad`` work as
without it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from memfit._host_memory import pinned_size
from memfit.technique._base import Place

__all__ = ["HostStepping", "each_optimizer", "host_stepping_of"]

_ATTRIBUTE = "_memfit_host_stepping"  # where an optimizer keeps its HostStepping


class HostStepping:
    """``optimizer`` made to step on the host (see the module's docstring); :meth:`undo` puts
    its parameters, states and ``step`` back."""

    def __init__(self, optimizer: torch.optim.Optimizer, place: Place) -> None:
        self.optimizer = optimizer
        self.place = place
        self.pairs: list[tuple[torch.Tensor, torch.Tensor]] = []  # (GPU parameter, host copy)
        self.grads: dict[int, torch.Tensor] = {}  # pinned gradient buffers, by pair
        self.moved: set[tuple[int, str]] = set()  # the states moved here: (id of host copy, key)
        for group in optimizer.param_groups:
            hosts = []
            for p in group["params"]:
                host = place.host_empty_like(p)
                host.copy_(p.detach())
                hosts.append(host)
                self.pairs.append((p, host))
            group["params"] = hosts
        by_gpu = {id(p): host for p, host in self.pairs}
        moved = {}
        for p, state in list(optimizer.state.items()):  # states a step has made already
            host = by_gpu.get(id(p), p)
            moved[host] = {k: self._to_host(v, host, k) for k, v in state.items()}
        optimizer.state.clear()
        optimizer.state.update(moved)
        self._step = optimizer.step
        self._own_step = vars(optimizer).get("step")  # one set on the instance before, if any
        optimizer.step = self.step  # type: ignore[method-assign]
        setattr(optimizer, _ATTRIBUTE, self)
        place.synchronize()

    def step(self, *args: Any, **kwargs: Any) -> Any:
        """Copy the gradients to the host (each freed on the GPU once its copy is queued), step
        there, and copy the parameters back."""
        for i, (p, host) in enumerate(self.pairs):
            if p.grad is None:
                host.grad = None
                continue
            grad = self.grads.get(i)
            if grad is None:  # made at the first step, kept: zero_grad drops only the reference
                grad = self.grads[i] = self.place.host_empty_like(p.grad)
            grad.copy_(p.grad, non_blocking=True)
            host.grad = grad
            p.grad = None
        self.place.synchronize()
        with self.place.on_host():
            out = self._step(*args, **kwargs)
        with torch.no_grad():
            for p, host in self.pairs:
                p.copy_(host, non_blocking=True)
        return out

    def host_bytes(self) -> int:
        """What it holds on the host: the parameters' and gradients' pinned copies, and the
        states."""
        total = 0
        for _, host in self.pairs:
            total += pinned_size(_nbytes(host))
        total += sum(pinned_size(_nbytes(g)) for g in self.grads.values())
        return total + self.state_bytes()

    def state_bytes(self) -> int:
        """What the optimizer's states take on the host."""
        return sum(
            _nbytes(v)
            for state in self.optimizer.state.values()
            for v in state.values()
            if isinstance(v, torch.Tensor)
        )

    def undo(self) -> None:
        """The optimizer as it was, its states back on the GPU beside their parameters."""
        self.place.synchronize()
        by_host = {id(host): p for p, host in self.pairs}
        for group in self.optimizer.param_groups:
            group["params"] = [by_host.get(id(h), h) for h in group["params"]]
        on_device = {  # groups whose step counts live beside their parameters
            id(p)
            for group in self.optimizer.param_groups
            if group.get("fused") or group.get("capturable")
            for p in group["params"]
        }
        moved = {}
        for host, state in list(self.optimizer.state.items()):
            p = by_host.get(id(host), host)
            moved[p] = {
                k: v.to(p.device) if self._back(v, id(host), k, id(p) in on_device) else v
                for k, v in state.items()
            }
        self.optimizer.state.clear()
        self.optimizer.state.update(moved)
        if self._own_step is None:
            del self.optimizer.step  # the class's own again
        else:
            self.optimizer.step = self._own_step  # type: ignore[method-assign]
        delattr(self.optimizer, _ATTRIBUTE)

    def _back(self, value: Any, host: int, key: str, counts_on_device: bool) -> bool:
        """Whether a state goes back to the GPU: every tensor but a step count, which goes
        where it came from, or where its optimizer keeps them (fused or capturable: beside
        the parameter; else on the CPU)."""
        if not isinstance(value, torch.Tensor):
            return False
        return value.dim() > 0 or (host, key) in self.moved or counts_on_device

    def _to_host(self, value: Any, param: torch.Tensor, key: str) -> Any:
        """A state of the GPU's (a step count on the CPU stays where it is) copied to the
        host."""
        if not isinstance(value, torch.Tensor) or value.device.type == "cpu":
            return value
        host = self.place.host_empty_like(value)
        host.copy_(value)
        self.moved.add((id(param), key))
        return host


def each_optimizer(optimizer: Any) -> list[Any]:
    """``optimizer`` as a list: a step's one optimizer, or the several a step function made."""
    return list(optimizer) if isinstance(optimizer, (list, tuple)) else [optimizer]


def host_stepping_of(optimizer: Any) -> Iterator[HostStepping]:
    """The host stepping of ``optimizer`` (one or a list of them), where it has one."""
    for one in each_optimizer(optimizer):
        found = getattr(one, _ATTRIBUTE, None)
        if isinstance(found, HostStepping):
            yield found


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()
