"""The optimizer step fused into backward: each parameter is stepped, and its gradient freed, as
soon as backward has finished its gradient.

A step normally holds every gradient until ``optimizer.step()``; stepped in backward, a
gradient lives from its accumulation to its parameter's update, so the step's peak holds the
gradients of the parameters backward is still working on instead of all of them (a
Llama-2-7B's bf16 gradients are 12.6 GiB). The price: gradients cannot be accumulated over
micro-batches, nor looked at together (clipping by the global norm, GradScaler's unscale and
inf check), and each parameter's update is a call of its own.

:class:`OptimizerInBackward` hangs the steps on the parameters' post-accumulate-grad hooks,
through one copy of the user's optimizer per parameter that shares its state (so its
``state_dict`` stays whole) and reads its hyperparameters at every step (so an LR scheduler
acting on it still does). The updates run fused (one kernel per parameter) where the
optimizer has a fused implementation.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

__all__ = ["Around", "OptimizerInBackward"]

# called around one parameter's update: (parameter, its optimizer, the update)
Around = Callable[[nn.Parameter, torch.optim.Optimizer, Callable[[], None]], None]


def _run(param: nn.Parameter, optimizer: torch.optim.Optimizer, update: Callable[[], None]) -> None:
    update()


class OptimizerInBackward:
    """Steps ``optimizer``'s parameters in backward until :meth:`remove` (see the module).

    ``around`` wraps each parameter's update (the trace marks the gradient and the state it
    makes). ``fused`` runs each update through the fused implementation. The optimizer's state
    and groups are looked up at every update, so that ``load_state_dict`` (a resumed run),
    which replaces both, is followed. ``stepped`` counts the updates.
    """

    def __init__(
        self, optimizer: torch.optim.Optimizer, *, fused: bool = True, around: Around = _run
    ) -> None:
        self.optimizer = optimizer
        self.fused = fused
        self.stepped = 0
        self._around = around
        self._copies: dict[int, tuple[torch.optim.Optimizer, int, int]] = {}
        self._handles: list[Any] = []
        # the parameters hold their hook; the hook holds this weakly (this holds the
        # optimizer, which holds the parameters: a cycle would outlive a dropped model)
        step = weakref.WeakMethod(self._step)

        def hook(p: torch.Tensor) -> None:
            bound = step()
            if bound is not None:
                bound(p)

        for g, group in enumerate(optimizer.param_groups):
            for i, p in enumerate(group["params"]):
                if not p.requires_grad or id(p) in self._copies:
                    continue
                self._copies[id(p)] = (self._copy(), g, i)
                self._handles.append(p.register_post_accumulate_grad_hook(hook))

    def _copy(self) -> torch.optim.Optimizer:
        """A copy of the optimizer that shares its state. ``copy`` takes what pickling does
        (defaults, state, groups), so the copy has none of the hooks users put on theirs (they
        would run once per parameter) nor a ``step`` an LR scheduler patched onto the instance
        (bound to the original, it would step every parameter)."""
        return copy.copy(self.optimizer)

    def _step(self, p: torch.Tensor) -> None:
        one, g, i = self._copies[id(p)]
        group = self.optimizer.param_groups[g]  # as it is now: an LR schedule, a reload
        own = {**group, "params": [group["params"][i]]}
        if self.fused and "fused" in group:
            own.update(fused=True, foreach=False)
        one.param_groups = [own]
        one.state = self.optimizer.state

        def update() -> None:
            one.step()
            p.grad = None

        self._around(p, one, update)  # type: ignore[arg-type]
        self.stepped += 1

    def remove(self) -> None:
        """Take the hooks off: the optimizer steps when it is called again."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._copies.clear()
