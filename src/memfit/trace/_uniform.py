"""Values of large tensors that hold one value everywhere, kept as that value expanded.

Models make masks inside their forward: ViLT's ``pixel_mask = torch.ones(batch, height, width)``
is 75 million elements at batch 512, far more than the trace computes on the host
(``_shadow``), yet the model then reads values of a small tensor computed from it (the patches
each image covers, interpolated from the mask) and shapes the step by them. A tensor filled
with one value costs nothing as that value expanded (strides of 0), and so do its views, casts
and elementwise results: ``uniform_values`` gives those, so that the small tensor computed from
them later has its real values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from memfit.trace._leaves import tensors_in

__all__ = ["uniform_values"]

aten = torch.ops.aten

# factories and the index of their fill value (None: the value is the key's)
_FILLS: dict[Any, tuple[int | None, float]] = {
    aten.ones.default: (None, 1),
    aten.zeros.default: (None, 0),
    aten.ones_like.default: (None, 1),
    aten.zeros_like.default: (None, 0),
    aten.new_ones.default: (None, 1),
    aten.new_zeros.default: (None, 0),
    aten.full.default: (1, 0),
    aten.full_like.default: (1, 0),
    aten.new_full.default: (2, 0),
}
_CASTS = frozenset({aten._to_copy.default, aten.clone.default})

ShadowArgs = Callable[[Any, dict[str, Any]], "tuple[Any, Any] | None"]


def is_uniform(t: torch.Tensor) -> bool:
    """Whether ``t`` holds one value everywhere as laid out: every dimension longer than one
    has a stride of 0 (a value expanded)."""
    return all(size == 1 or stride == 0 for size, stride in zip(t.shape, t.stride(), strict=True))


def _one(t: Any) -> Any:
    """A uniform tensor's value as a 0-d tensor; other arguments as they are."""
    if isinstance(t, torch.Tensor) and t.numel() > 0:
        return t.reshape(-1)[:1].reshape(())
    return t


def _fill(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    where, value = _FILLS[func]
    if where is None:
        return value
    return args[where] if len(args) > where else kwargs.get("fill_value", value)


def uniform_values(
    func: Any, args: Any, kwargs: dict[str, Any], out: torch.Tensor, shadow_args: ShadowArgs
) -> torch.Tensor | None:
    """The value of ``out`` as one value expanded, where ``func`` fills it with one value or
    every input holds one value and ``func`` is a view, a cast or elementwise; None otherwise
    (random and in-place ops included)."""
    schema = getattr(func, "_schema", None)
    if schema is None or schema.is_mutable or torch.Tag.nondeterministic_seeded in func.tags:
        return None
    if func in _FILLS:
        fill = _fill(func, args, kwargs)
        if isinstance(fill, torch.Tensor):
            return None
        return torch.full((), fill, dtype=out.dtype).expand(out.shape)
    elementwise = torch.Tag.pointwise in func.tags or func in _CASTS
    if not (func.is_view or elementwise):
        return None
    shadow = shadow_args(args, kwargs)
    if shadow is None:
        return None
    inputs = tensors_in(shadow)
    if not inputs or not all(is_uniform(t) for t in inputs):
        return None
    try:
        if func.is_view:  # a view of a value expanded is one too, and costs nothing
            value = func(*shadow[0], **shadow[1])
        else:
            collapsed = [_one(x) for x in shadow[0]]
            value = func(*collapsed, **{k: _one(v) for k, v in shadow[1].items()})
    except Exception:  # arguments a 0-d value does not take (a memory format): no value
        return None
    if not isinstance(value, torch.Tensor) or value.dtype != out.dtype:
        return None
    if func.is_view:
        return value if tuple(value.shape) == tuple(out.shape) else None
    return value.reshape(()).expand(out.shape) if value.numel() == 1 else None
