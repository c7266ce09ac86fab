"""Skip meta kernels whose answer is already known.

A trace spends most of its time in meta kernels, many of them Python (``torch._refs``,
``torch._meta_registrations``), computing output shapes that it has computed before: the
twelve layers of a transformer run the same ops on the same shapes, and the optimizer runs the
same foreach ops on the same parameters at every step and in every estimate a batch-size
search makes. On meta tensors an op's outputs depend only on its inputs' metadata and its
other arguments, so :class:`MetaCache` remembers them by that key:

* a functional op (no argument written, no output aliasing an input) whose outputs are fresh
  meta tensors: the outputs are made again with ``empty_strided``, each a new storage of the
  same size, which is all the recorder reads;
* an in-place op (``add_``, ``_foreach_mul_``) that only writes its arguments: the meta
  kernel merely checks them, so an argument set it accepted once is accepted again; the
  op's result is its first argument (or nothing).

Everything else (views, ``out=`` variants, resizes, outputs on other devices, ops that share
storage between outputs) runs its kernel every time.
"""

from __future__ import annotations

from typing import Any

import torch

from memfit.trace._leaves import tensors_in

__all__ = ["META_CACHE", "MetaCache", "span"]

_EMPTY = torch.ops.aten.empty_strided.default
# keys and specs only read metadata: with torch-function handling off, the reads skip the trace's
# TorchFunctionMode (which leaves them unchanged), a third of its calls in a Llama step
_NO_FUNCTION_MODE = torch._C.DisableTorchFunction
_UNCACHEABLE = object()
_NO_RESULT = object()  # an in-place op that returns nothing
_KINDS: dict[Any, str] = {}  # op -> "functional", "inplace" or "" (never cached)


def _kind(func: Any) -> str:
    found = _KINDS.get(func)
    if found is None:
        found = _KINDS[func] = _classify(func)
    return found


def _classify(func: Any) -> str:
    if not isinstance(func, torch._ops.OpOverload):
        return ""
    schema = func._schema
    if torch.Tag.inplace_view in func.tags or torch.Tag.dynamic_output_shape in func.tags:
        return ""
    written = [a for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    aliased = [r for r in schema.returns if r.alias_info is not None]
    if not written and not aliased:
        return "functional"
    name = schema.name.split("::")[-1]
    if (
        written
        and schema.overload_name != "out"
        and not any(a.kwarg_only for a in written)
        and name.endswith("_")
        and not name.lstrip("_").startswith(("resize", "set_"))
        and all(r.alias_info is not None and r.alias_info.is_write for r in aliased)
        and len(schema.returns) <= 1
    ):
        return "inplace"
    return ""


def _meta_key(value: Any, scalars: bool) -> Any:
    if isinstance(value, torch.Tensor):
        if value.device.type != "meta" or value.layout != torch.strided:
            raise _NotCacheable
        return (tuple(value.shape), value.stride(), value.storage_offset(), value.dtype)
    if isinstance(value, (list, tuple)):
        return tuple(_meta_key(v, scalars) for v in value)
    if isinstance(value, float) and not scalars:
        return float  # an in-place op's float argument only needs to be a float
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype, torch.device)):
        return value
    if isinstance(value, (torch.memory_format, torch.layout)):
        return value
    raise _NotCacheable


class _NotCacheable(Exception):
    pass


class MetaCache:
    """``call(func, args, kwargs)`` runs ``func`` or answers it from an earlier run.

    At most ``max_entries`` answers are kept (a process that estimates many models would
    otherwise keep every shape it met); past that the cache starts again, empty.
    """

    def __init__(self, max_entries: int = 50_000) -> None:
        self.max_entries = max_entries
        self._entries: dict[Any, Any] = {}
        self.hits = 0
        self.misses = 0

    def call(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        kind = _kind(func)
        if not kind:
            return func(*args, **kwargs)
        try:
            with _NO_FUNCTION_MODE():
                key = (
                    func,
                    torch.get_default_dtype(),
                    _meta_key(args, kind == "functional"),
                    tuple((k, _meta_key(v, kind == "functional")) for k, v in kwargs.items()),
                )
        except _NotCacheable:
            return func(*args, **kwargs)
        entry = self._entries.get(key)
        if entry is None and kind == "inplace" and _checks_nothing(func, args, kwargs):
            self._entries[key] = _NO_RESULT
            return None
        if entry is None:
            self.misses += 1
            out = func(*args, **kwargs)
            if len(self._entries) >= self.max_entries:
                self._entries.clear()
            with _NO_FUNCTION_MODE():
                self._entries[key] = (
                    _fresh_spec(out, args, kwargs)
                    if kind == "functional"
                    else _inplace_spec(out, args)
                )
            return out
        if entry is _UNCACHEABLE:
            return func(*args, **kwargs)
        self.hits += 1
        if kind == "inplace":
            return None if entry is _NO_RESULT else args[0]
        return _build(entry)


def _checks_nothing(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """An in-place foreach op (``_foreach_mul_``, an optimizer's) whose tensor lists match
    position by position in shape and dtype: its meta kernel, a Python loop of per-tensor
    broadcast checks (half a second for Llama-2-7B's first AdamW step), can only accept."""
    if not func.__name__.startswith("_foreach_") or func._schema.returns:
        return False
    lists = [a for a in (*args, *kwargs.values()) if isinstance(a, (list, tuple))]
    tensors = [a for a in lists if a and isinstance(a[0], torch.Tensor)]
    if not tensors or not all(len(t) == len(tensors[0]) for t in lists):
        return False
    with _NO_FUNCTION_MODE():
        for column in zip(*tensors, strict=True):
            first = column[0]
            if not all(
                isinstance(t, torch.Tensor)
                and t.device.type == "meta"
                and t.shape == first.shape
                and t.dtype == first.dtype
                for t in column
            ):
                return False
    others = (*args, *kwargs.values())
    return not any(isinstance(a, torch.Tensor) and a.dim() > 0 for a in others)


def _fresh_spec(out: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """What it takes to make ``out`` again, or ``_UNCACHEABLE``."""
    single = isinstance(out, torch.Tensor)
    items = [out] if single else out
    if not isinstance(items, (list, tuple)):
        return _UNCACHEABLE
    taken = {
        t.untyped_storage()._cdata for t in tensors_in((args, kwargs)) if t.device.type == "meta"
    }
    specs: list[Any] = []
    for t in items:
        if t is None:
            specs.append(None)
            continue
        if not isinstance(t, torch.Tensor) or t.device.type != "meta" or t.is_sparse:
            return _UNCACHEABLE
        storage = t.untyped_storage()
        if storage._cdata in taken or t.storage_offset() != 0 or t.requires_grad:
            return _UNCACHEABLE
        taken.add(storage._cdata)
        size, stride = tuple(t.shape), t.stride()
        if storage.nbytes() != span(size, stride) * t.element_size():
            return _UNCACHEABLE
        specs.append((size, stride, t.dtype))
    return (single, type(out), specs)


def span(size: tuple[int, ...], stride: tuple[int, ...]) -> int:
    """Elements a tensor of this size and stride reaches, from its first."""
    if 0 in size:
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(size, stride, strict=True))


def _inplace_spec(out: Any, args: tuple[Any, ...]) -> Any:
    if out is None or (isinstance(out, (list, tuple)) and not out):
        return _NO_RESULT
    if args and out is args[0]:
        return "self"
    return _UNCACHEABLE


def _build(spec: Any) -> Any:
    single, kind, specs = spec
    with _NO_FUNCTION_MODE():
        outs = [None if s is None else _EMPTY(s[0], s[1], dtype=s[2], device="meta") for s in specs]
    if single:
        return outs[0]
    return list(outs) if kind is list else tuple(outs)


META_CACHE = MetaCache()  # shared by all traces: keys hold everything an answer depends on
