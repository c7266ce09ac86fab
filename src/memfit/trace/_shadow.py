"""Real values for the small tensors of a trace, so data-dependent code takes the real branch.

Meta tensors have no values, yet models ask for them: ``if mask.all()``, ``x.item()``,
``nonzero``. Tensors that come from the inputs and constants (masks, ids, positions) are small,
so each such op is also run on real CPU "shadow" tensors beside the meta ones. When a value is
asked for, the shadow answers; when there is none, memfit answers as typical data would
(all-ones masks, no inf or nan) and records where, so the estimate can say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten
from torch.utils.weak import WeakTensorKeyDictionary

if TYPE_CHECKING:
    from memfit.trace._recorder import Recorder

__all__ = ["Answer", "ShadowValues"]

aten = torch.ops.aten
_MAX_NUMEL = 1 << 20
_TRUE_BY_DEFAULT = {"all", "eq", "ge", "le", "isfinite", "logical_and"}
_DYNAMIC_SHAPE = {
    aten.nonzero.default,
    aten.masked_select.default,
    aten.unique_dim.default,
    aten._unique2.default,
    aten.unique_consecutive.default,
}


@dataclass(frozen=True, slots=True)
class Answer:
    """The result of an op that meta tensors cannot compute."""

    value: Any


def _cpu(obj: Any) -> Any:
    if isinstance(obj, torch.device) and obj.type == "meta":
        return torch.device("cpu")
    return obj


class ShadowValues:
    """Real CPU values kept beside small meta tensors."""

    def __init__(self) -> None:
        self._values = WeakTensorKeyDictionary()
        self._producer = WeakTensorKeyDictionary()
        self.guesses: list[str] = []

    def set(self, meta: torch.Tensor, value: torch.Tensor) -> None:
        self._values[meta] = value

    def get(self, meta: torch.Tensor) -> torch.Tensor | None:
        return self._values.get(meta)  # type: ignore[no-any-return]

    # -- running ops on shadows ----------------------------------------------------------------
    def _shadow_args(self, args: Any, kwargs: dict[str, Any]) -> tuple[Any, Any] | None:
        flat, spec = tree_flatten((args, kwargs))
        out: list[Any] = []
        for x in flat:
            if isinstance(x, torch.Tensor) and x.device.type == "meta":
                value = self._values.get(x)
                if value is None:
                    return None
                out.append(value)
            else:
                out.append(_cpu(x))
        new_args, new_kwargs = tree_unflatten(out, spec)
        return new_args, new_kwargs

    def propagate(self, func: Any, args: Any, kwargs: dict[str, Any], out: Any) -> None:
        """Run ``func`` on its inputs' shadows if all have one and the output is small."""
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else ""
        for t in outs:
            if t.numel() == 1:
                self._producer[t] = name
        if not outs or any(t.numel() > _MAX_NUMEL for t in outs):
            self._invalidate_mutated(func, args)
            return
        shadow = self._shadow_args(args, kwargs)
        if shadow is None:
            self._invalidate_mutated(func, args)
            return
        try:
            real = func(*shadow[0], **shadow[1])
        except Exception:
            self._invalidate_mutated(func, args)
            return
        reals = [t for t in tree_flatten(real)[0] if isinstance(t, torch.Tensor)]
        for fake, value in zip(outs, reals, strict=False):
            if tuple(fake.shape) == tuple(value.shape):
                self._values[fake] = value

    def _invalidate_mutated(self, func: Any, args: Any) -> None:
        schema = getattr(func, "_schema", None)
        if schema is None or not schema.is_mutable:
            return
        for arg, value in zip(schema.arguments, args, strict=False):
            if arg.is_write and isinstance(value, torch.Tensor):
                self._values.pop(value, None)

    # -- ops whose result needs values -----------------------------------------------------
    def answer(self, func: Any, args: Any, kwargs: dict[str, Any], rec: Recorder) -> Answer | None:
        if func is aten._local_scalar_dense.default:
            return Answer(self._scalar(args[0], rec))
        if func is aten.is_nonzero.default:
            return Answer(bool(self._scalar(args[0], rec)))
        if func is aten.equal.default:
            a, b = self.get(args[0]), self.get(args[1])
            if a is not None and b is not None:
                return Answer(bool(torch.equal(a, b)))
            self._guess(rec, "equal", "True")
            return Answer(True)
        if func in _DYNAMIC_SHAPE:
            return Answer(self._dynamic(func, args, kwargs, rec))
        return None

    def _scalar(self, t: torch.Tensor, rec: Recorder) -> Any:
        value = self.get(t)
        if value is not None:
            return value.item()
        producer = self._producer.get(t, "")
        guess: Any
        if t.dtype == torch.bool:
            guess = producer in _TRUE_BY_DEFAULT
        elif t.is_floating_point():
            guess = 0.0
        else:
            guess = 0
        self._guess(rec, f"{producer or 'a tensor'}.item()", repr(guess))
        return guess

    def _dynamic(self, func: Any, args: Any, kwargs: dict[str, Any], rec: Recorder) -> Any:
        shadow = self._shadow_args(args, kwargs)
        if shadow is not None:
            real = func(*shadow[0], **shadow[1])

            def to_meta(x: Any) -> Any:
                if not isinstance(x, torch.Tensor):
                    return x
                meta = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
                self._values[meta] = x
                return meta

            return tree_map(to_meta, real)
        src = args[0]
        name = func.overloadpacket.__name__
        self._guess(rec, name, "its largest possible size")
        if func is aten.nonzero.default:
            return torch.empty((src.numel(), src.dim()), dtype=torch.long, device="meta")
        if func is aten.masked_select.default:
            return torch.empty((src.numel(),), dtype=src.dtype, device="meta")
        raise NotImplementedError(name)

    def _guess(self, rec: Recorder, what: str, answer: str) -> None:
        module = rec.module_of() or "the model"
        self.guesses.append(f"{what} in {module} has no known value; answered {answer}")
