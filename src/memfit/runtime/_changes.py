"""The reversible changes ``memfit.apply`` makes to a model, its optimizer and the allocator.

Each change is checked when it is built (nothing changes then), made by ``do()`` and taken back
by ``undo()``, which restores what ``do()`` found: ``memfit.apply`` builds every change first,
makes them in order (taking back those made if a later one fails) and ``memfit.unapply`` takes
them back in reverse order.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from memfit._errors import InvalidInputError
from memfit.technique import GpuPlace, Technique, Undo

__all__ = [
    "RECORD",
    "Applied",
    "Cast",
    "Change",
    "OptimizerFlags",
    "TechniqueChange",
    "applied_record",
]

_MISSING = object()
RECORD = "_memfit_applied"  # the model's attribute that holds its Applied record


class Change:
    """One reversible change; ``text`` says what it is, for ``PlannedStep.changes``.

    The record of the changes hangs on the model, so a change holds the model (and any module
    of it) weakly: held strongly, a model dropped while a plan is applied would live on, with
    its GPU memory, until the garbage collector ran."""

    text = ""

    def do(self) -> None:
        raise NotImplementedError

    def undo(self) -> None:
        raise NotImplementedError


@dataclass(eq=False)
class Applied:
    """What ``memfit.apply`` changed on a model (kept on the model, for ``memfit.unapply``)."""

    changes: list[Change]
    optimizer: weakref.ReferenceType[torch.optim.Optimizer]
    plan_model: str

    def __deepcopy__(self, memo: dict[int, Any]) -> None:
        return None  # a copy of the model is not the model the plan was applied to


def _alive(ref: weakref.ReferenceType[nn.Module]) -> nn.Module:
    module = ref()
    if module is None:  # only unapply, which is given the model, calls undo
        raise InvalidInputError("The model this change was made to is gone.")
    return module


def applied_record(model: nn.Module) -> Applied | None:
    """The record of the plan applied to ``model`` (already unwrapped), or ``None``."""
    record = model.__dict__.get(RECORD)
    return record if isinstance(record, Applied) else None


class Cast(Change):
    """Pure low precision: every floating parameter and buffer cast to ``dtype`` (parameters
    keep their identity, so the optimizer still holds them); ``undo`` casts each back to the
    dtype it had. The values keep the low precision's rounding."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, dtype: torch.dtype):
        self._model = weakref.ref(model)
        self.optimizer = optimizer
        self.dtype = dtype
        self.text = f"parameters and buffers cast to {str(dtype).removeprefix('torch.')}"
        self._dtypes: list[tuple[weakref.ReferenceType[nn.Module], str, bool, torch.dtype]] = []

    def do(self) -> None:
        self._dtypes = []
        for module in _alive(self._model).modules():
            for kind, table in (("p", module._parameters), ("b", module._buffers)):
                for name, t in table.items():
                    if t is not None and t.is_floating_point() and t.dtype != self.dtype:
                        self._dtypes.append((weakref.ref(module), name, kind == "p", t.dtype))
        self._cast([(m, n, p, self.dtype) for m, n, p, _ in self._dtypes])

    def undo(self) -> None:
        self._cast(self._dtypes)

    def _cast(
        self, targets: list[tuple[weakref.ReferenceType[nn.Module], str, bool, torch.dtype]]
    ) -> None:
        seen: set[int] = set()
        for ref, name, is_param, dtype in targets:
            module = _alive(ref)
            if is_param:
                p = module._parameters[name]
                if p is None or id(p) in seen:  # a tied weight is cast once
                    continue
                seen.add(id(p))
                p.data = p.data.to(dtype)
                if p.grad is not None:
                    p.grad = p.grad.to(dtype)
            else:
                buf = module._buffers[name]
                if buf is not None:
                    module._buffers[name] = buf.to(dtype)
        if self.optimizer.state:  # as load_state_dict does: state follows its parameter's dtype
            self.optimizer.load_state_dict(self.optimizer.state_dict())


class OptimizerFlags(Change):
    """The optimizer's implementation: each param group's ``fused`` and ``foreach``, as
    ``torch.optim`` reads them at every ``step()`` (Adam, AdamW and SGD in torch 2.x)."""

    def __init__(self, optimizer: torch.optim.Optimizer, fused: bool, foreach: bool, name: str):
        self.optimizer = optimizer
        self.flags = {"fused": fused, "foreach": foreach}
        self.text = f"optimizer {name}: fused={fused}, foreach={foreach}"
        self._groups: list[dict[str, Any]] = []
        self._amp: Any = _MISSING

    def do(self) -> None:
        opt = self.optimizer
        self._groups = [{k: g.get(k, _MISSING) for k in self.flags} for g in opt.param_groups]
        self._amp = opt.__dict__.get("_step_supports_amp_scaling", _MISSING)
        for group in opt.param_groups:
            group.update(self.flags)
        # GradScaler hands a fused optimizer its scale; the others unscale the gradients first
        opt.__dict__["_step_supports_amp_scaling"] = self.flags["fused"]
        self._place_steps()

    def undo(self) -> None:
        opt = self.optimizer
        for group, saved in zip(opt.param_groups, self._groups, strict=True):
            for key, value in saved.items():
                if value is _MISSING:
                    group.pop(key, None)
                else:
                    group[key] = value
        if self._amp is _MISSING:
            opt.__dict__.pop("_step_supports_amp_scaling", None)
        else:
            opt.__dict__["_step_supports_amp_scaling"] = self._amp
        self._place_steps()

    def _place_steps(self) -> None:
        """Put each ``step`` count where torch keeps it for the group's flags: on the
        parameter's device in float32 when fused or capturable, else on the CPU."""
        for group in self.optimizer.param_groups:
            on_device = bool(group.get("fused")) or bool(group.get("capturable"))
            for p in group["params"]:
                step = self.optimizer.state.get(p, {}).get("step")
                if isinstance(step, torch.Tensor):
                    where = p.device if on_device else torch.device("cpu")
                    dtype = torch.float32 if on_device else step.dtype
                    self.optimizer.state[p]["step"] = step.to(device=where, dtype=dtype)


class TechniqueChange(Change):
    """One of ``memfit.technique``'s techniques at ``value``, made by its own ``apply`` on the
    live model and optimizer (their host tensors pinned CPU memory); ``undo`` is what that
    returned."""

    def __init__(
        self, technique: Technique, value: Any, model: nn.Module, optimizer: torch.optim.Optimizer
    ) -> None:
        refusal = technique.refusal_live(value, model)
        if refusal is not None:
            raise InvalidInputError(refusal)
        self.technique, self.value = technique, value
        self._model = weakref.ref(model)
        self.optimizer = optimizer
        self.text = technique.live_words(value, model)
        self._undo: Undo | None = None

    def do(self) -> None:
        place = GpuPlace()
        self._undo = self.technique.apply(self.value, _alive(self._model), self.optimizer, place)

    def undo(self) -> None:
        if self._undo is not None:
            self._undo()
            self._undo = None
