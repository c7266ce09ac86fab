"""Real values for the small tensors of a trace, so data-dependent code takes the real branch.

Meta tensors have no values, yet models ask for them: ``if mask.all()``, ``x.item()``,
``nonzero``. Tensors that come from the inputs and constants (masks, ids, positions) are small,
so each such op is also run on real CPU "shadow" tensors beside the meta ones: the batch's own
tensors are their shadows, whatever their size, and what is computed from them alone is kept
up to ``_BATCH_MAX_NUMEL`` elements. When a value is asked for, the shadow answers; when there
is none, memfit answers as typical data would (all-ones masks, no inf or nan), and an output
whose shape depends on values gets its largest possible shape (``_data_shapes``); either way
it records where, so the estimate can say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten
from torch.utils.weak import WeakTensorKeyDictionary

from memfit.trace._data_shapes import (
    MOVES_VALUES,
    SHAPE_ONLY,
    display_name,
    is_dynamic,
    keep_capacity,
    largest,
    sized_by_known,
)
from memfit.trace._generate import TOKEN_CHOICES, Generation
from memfit.trace._host_data import copies_to_host, host_copy
from memfit.trace._leaves import tensors_in
from memfit.trace._routing import ROUTED_MAX_NUMEL, Routing, grouped_mm_output
from memfit.trace._uniform import uniform_values

if TYPE_CHECKING:
    from memfit.trace._recorder import Recorder

__all__ = ["Answer", "ShadowValues"]

aten = torch.ops.aten
_MAX_NUMEL = 1 << 20
# values computed from the batch alone (masks, lengths) are kept up to this size: what the
# model reads of them must be the batch's own answer
_BATCH_MAX_NUMEL = 1 << 24
# a boolean read without values is guessed True where it is a check that the data is valid
# (``torch.distributions``' support checks end in ``_is_all_true``), else False
_TRUE_BY_DEFAULT = {"all", "_is_all_true", "eq", "ge", "gt", "le", "lt", "isfinite", "logical_and"}
_UNSCALE = aten._amp_foreach_non_finite_check_and_unscale_.default
_GROUPED_MM = aten._grouped_mm.default
_TOPK = aten.topk.default


@dataclass(frozen=True, slots=True)
class Answer:
    """The result of an op that meta tensors cannot compute."""

    value: Any


class _Nested(Exception):
    """Arguments nested deeper than a list: swapped through pytree instead."""


def _tensors(out: Any) -> list[torch.Tensor]:
    """The tensors of an op's output: a tensor or a tuple of them, mostly (fast paths)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in out):
        return list(out)
    return tensors_in(out)


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
        self.routing = Routing()  # mixture-of-experts routers' choices, by a policy
        self.generation = Generation(notes=self.guesses)  # tokens chosen from logits
        # which leaves of the batch (by position) each value came from, and which of them the
        # answers to value questions read since ``depends`` was last emptied: a later step with
        # other values there may run another program (_repeat)
        self._origin = WeakTensorKeyDictionary()
        self.depends: set[int] = set()
        self.batch_values: dict[int, torch.Tensor] = {}  # the last batch's shadowed leaves
        # tensors without values whose values are among known ones (``MOVES_VALUES``)
        self._drawn_from = WeakTensorKeyDictionary()

    def set(self, meta: torch.Tensor, value: torch.Tensor, leaf: int | None = None) -> None:
        """Give ``meta`` its value; ``leaf``: its position in the batch, if it is an input."""
        self._values[meta] = value
        if leaf is not None:
            self._origin[meta] = frozenset((leaf,))
            self.batch_values[leaf] = value

    def _origins(self, args: Any, kwargs: dict[str, Any]) -> frozenset[int]:
        """The batch leaves the meta tensors among ``args`` (one list deep) came from."""
        if not self._origin:
            return frozenset()
        found: frozenset[int] = frozenset()
        for x in (*args, *kwargs.values()):
            for t in x if isinstance(x, (list, tuple)) else (x,):
                if isinstance(t, torch.Tensor) and t.device.type == "meta":
                    found |= self._origin.get(t, frozenset())
        return found

    def get(self, meta: torch.Tensor) -> torch.Tensor | None:
        return self._values.get(meta)  # type: ignore[no-any-return]

    # -- running ops on shadows ----------------------------------------------------------------
    def _lacks_shadow(self, args: Any, kwargs: dict[str, Any]) -> bool:
        """A quick look (arguments and lists in them) for a meta tensor without a shadow: most
        ops of a model have one (a weight), and flattening every op's arguments is slow."""
        for x in (*args, *kwargs.values()):
            for t in x if isinstance(x, (list, tuple)) else (x,):
                meta = isinstance(t, torch.Tensor) and t.device.type == "meta"
                if meta and t not in self._values:
                    return True
        return False

    def _swap(self, x: Any, nested: bool = False) -> Any:
        """``x`` with meta tensors swapped for their shadows (which :meth:`_lacks_shadow` has
        found), meta devices for the host; plain lists and tuples one level deep."""
        if isinstance(x, torch.Tensor):
            return self._values[x] if x.device.type == "meta" else x
        if type(x) in (list, tuple) and not nested:
            return type(x)(self._swap(t, nested=True) for t in x)
        if isinstance(x, (list, tuple, dict)):
            raise _Nested
        return _cpu(x)

    def _shadow_args(self, args: Any, kwargs: dict[str, Any]) -> tuple[Any, Any] | None:
        if self._lacks_shadow(args, kwargs):
            return None
        try:  # most ops: tensors, scalars and lists of them, swapped without flattening
            return tuple(self._swap(x) for x in args), {k: self._swap(v) for k, v in kwargs.items()}
        except _Nested:
            pass
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
        if func is _UNSCALE:  # GradScaler's inf check: typical gradients are finite
            found_inf = args[1]
            self._values[found_inf] = torch.zeros(found_inf.shape, dtype=found_inf.dtype)
            return
        outs = _tensors(out)
        name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else ""
        for t in outs:
            if t.numel() == 1:
                self._producer[t] = name
        if func is _TOPK and self._lacks_shadow(args, kwargs):
            choice = self.routing.choose(func, args, kwargs, out)
            if choice is not None:  # a router's top-k: its indices as the routing policy says
                self._values[outs[1]] = choice
                return
        if func in TOKEN_CHOICES and self._shadow_args(args, kwargs) is None:
            chosen = self.generation.choose(func, args, kwargs, outs)
            if chosen is not None:  # a token chosen from logits: an ordinary id, as real data
                self._values[chosen[0]] = chosen[1]
                return
        router = self.routing.derived(args, kwargs)
        limit = _MAX_NUMEL if router is None else ROUTED_MAX_NUMEL
        if not outs or not self._small(outs, limit, args, kwargs):
            uniform = None
            if len(outs) == 1:
                uniform = uniform_values(func, args, kwargs, outs[0], self._shadow_args)
            if uniform is not None:  # one value expanded: costs nothing
                self._values[outs[0]] = uniform
                return
            self._invalidate_mutated(func, args)
            self._carry_drawn(name, args, outs)
            return
        shadow = self._shadow_args(args, kwargs)
        if shadow is None and name in SHAPE_ONLY:
            shadow = self._shape_only_args(args, kwargs)
        if shadow is None:
            self._invalidate_mutated(func, args)
            self._carry_drawn(name, args, outs)
            return
        try:
            real = func(*shadow[0], **shadow[1])
        except Exception:
            self._invalidate_mutated(func, args)
            return
        reals = tensors_in(real)
        origin = self._origins(args, kwargs)
        for fake, value in zip(outs, reals, strict=False):
            if tuple(fake.shape) == tuple(value.shape):
                self._values[fake] = value
                if origin:
                    self._origin[fake] = origin
        self.routing.carry(router, outs)

    def _shape_only_args(self, args: Any, kwargs: dict[str, Any]) -> tuple[Any, Any] | None:
        """The arguments of a ``SHAPE_ONLY`` op with its first input, whose values it does not
        read, stood in for by a CPU tensor of its shape (one element, expanded)."""
        first = args[0]
        if not isinstance(first, torch.Tensor) or first.device.type != "meta":
            return None
        rest = self._shadow_args(args[1:], kwargs)
        if rest is None:
            return None
        stand_in = torch.empty((), dtype=first.dtype).expand(first.shape)
        return (stand_in, *rest[0]), rest[1]

    def _carry_drawn(self, name: str, args: Any, outs: list[torch.Tensor]) -> None:
        """Outputs of an op that moves values (``MOVES_VALUES``) without values of their own
        hold values of its first input: remember which, to bound ``unique``'s count."""
        if name not in MOVES_VALUES or not args:
            return
        drawn: list[torch.Tensor] = []
        for t in args[0] if isinstance(args[0], (list, tuple)) else (args[0],):
            if not isinstance(t, torch.Tensor) or t.device.type != "meta":
                return
            value = self._values.get(t)
            found = [value] if value is not None else self._drawn_from.get(t)
            if not found:
                return
            drawn += found
        for t in outs:
            self._drawn_from[t] = drawn

    def _distinct(self, t: Any) -> int | None:
        """How many distinct values ``t`` (without values) can hold, where known."""
        drawn = self._drawn_from.get(t) if isinstance(t, torch.Tensor) else None
        if not drawn:
            return None
        return int(torch.cat([d.flatten() for d in drawn]).unique().numel())

    def _small(self, outs: list[torch.Tensor], limit: int, args: Any, kwargs: Any) -> bool:
        """Whether outputs this large are computed on the CPU: up to ``limit`` elements, or
        up to ``_BATCH_MAX_NUMEL`` for values computed from the batch alone."""
        largest = max(t.numel() for t in outs)
        if largest <= limit:
            return True
        return largest <= _BATCH_MAX_NUMEL and bool(self._origins(args, kwargs))

    def _invalidate_mutated(self, func: Any, args: Any) -> None:
        schema = getattr(func, "_schema", None)
        if schema is None or not schema.is_mutable:
            return
        for arg, value in zip(schema.arguments, args, strict=False):
            if arg.is_write and isinstance(value, torch.Tensor):
                self._values.pop(value, None)
                base = value._base
                if base is not None and self._values.pop(base, None) is not None:
                    self._forget_views(base)  # a view written: its base's values changed
                for t in (value, base):
                    if t is not None and self._drawn_from:
                        self._drawn_from.pop(t, None)

    def _forget_views(self, base: torch.Tensor) -> None:
        """Drop the values of ``base``'s other views: their shadows are views of its shadow,
        which no longer holds what ``base`` holds (left as it was, an ``empty`` base's shadow
        would answer with whatever memory it was made of)."""
        stale = [t for t in self._values if t._base is base]
        for t in stale:
            del self._values[t]

    # -- ops whose result needs values -----------------------------------------------------
    def answer(self, func: Any, args: Any, kwargs: dict[str, Any], rec: Recorder) -> Answer | None:
        """The result of an op that needs values (``.item()``, ``nonzero``...), else None."""
        found = self._answer(func, args, kwargs, rec)
        if found is not None and func is not _GROUPED_MM:
            self.depends |= self._origins(args, kwargs)
        return found

    def _answer(self, func: Any, args: Any, kwargs: dict[str, Any], rec: Recorder) -> Answer | None:
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
        if is_dynamic(func, args, kwargs):
            return Answer(self._dynamic(func, args, kwargs, rec))
        if copies_to_host(func, args, kwargs):  # .tolist(), .cpu(): the values, or zeros
            src = args[1] if func is aten.copy_.default else args[0]
            guess = lambda what, answer: self._guess(rec, what, answer)  # noqa: E731
            return Answer(host_copy(func, args, kwargs, self.get(src), guess))
        if func is _GROUPED_MM:  # float32: CUDA runs it, the meta kernel refuses
            grouped = grouped_mm_output(args, kwargs)
            return None if grouped is None else Answer(grouped)
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

            result = tree_map(to_meta, real)
            keep_capacity(func, args, result)
            origin = self._origins(args, kwargs)
            if origin:
                for t in _tensors(result):
                    self._origin[t] = origin
            router = self.routing.derived(args, kwargs)
            self.routing.sized(router)  # per-expert token lists: their sizes follow the routing
            self.routing.carry(router, result)
            return result
        name = display_name(func)
        known = {i: v for i, a in enumerate(args) if (v := self._known(a)) is not None}
        sized = sized_by_known(func, args, kwargs, known)
        if sized is not None:
            return sized
        result, how = largest(func, args, kwargs, self._distinct(args[0]))
        module = rec.module_of() or "the model"
        self.guesses.append(
            f"{name} in {module} has no known input values (they are computed from the "
            f"model, not from the batch alone): its output was sized at its largest ({how}), "
            "an upper bound"
        )
        return result

    def _known(self, x: Any) -> torch.Tensor | None:
        """The value of ``x`` if it is a meta tensor with a shadow."""
        if isinstance(x, torch.Tensor) and x.device.type == "meta":
            return self.get(x)
        return None

    def _guess(self, rec: Recorder, what: str, answer: str) -> None:
        module = rec.module_of() or "the model"
        self.guesses.append(f"{what} in {module} has no known value; answered {answer}")
