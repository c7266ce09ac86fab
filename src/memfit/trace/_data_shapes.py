"""Ops whose output shape depends on values: their largest outputs, and masks as positions.

``nonzero``, ``unique``, ``bincount``, ``repeat_interleave`` and indexing by a boolean mask
size their outputs from the values of their inputs, which meta tensors lack. Where the inputs'
values are known (their shadows, ``_shadow.py``: the batch and what is computed from it alone)
the op runs on them and the shape is exact. Where they are not (a model's outputs), the
output is given its largest possible shape, which no values can exceed, so the estimate is an
upper bound; an op with no such bound is refused with the way out.

Where values are unknown, two facts keep bounds from running away: a selection or view of
known values holds only those values (``MOVES_VALUES``: labels gathered from an ``arange``
of the classes have at most that many distinct values, so a loop over their ``unique`` runs
once per class, as on the GPU), and some ops' values never depend on their input's values
(``SHAPE_ONLY``: ``full_like(scores, label)``).

Indexing by a boolean mask (``x[mask]``, ``masked_select``, ``x[mask] = values`` and the
backward of ``x[mask]``) runs on CUDA as ``nonzero`` of the mask, then indexing by those
positions (``expandTensors`` in ATen's ``TensorAdvancedIndexing.cpp``;
``masked_select_out_cuda_impl``). :func:`index_by_positions`, :func:`select_by_positions`
and :func:`put_by_positions` do the same here, under the trace's dispatch mode, so the
positions' tensor is allocated as on the GPU and only ``nonzero`` needs values.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = [
    "INDEX",
    "MASKED_SELECT",
    "MOVES_VALUES",
    "SHAPE_ONLY",
    "display_name",
    "has_mask",
    "index_by_positions",
    "is_dynamic",
    "keep_capacity",
    "largest",
    "put_by_positions",
    "puts_by_positions",
    "select_by_positions",
    "sized_by_known",
]

aten = torch.ops.aten
INDEX = aten.index.Tensor
MASKED_SELECT = aten.masked_select.default
_BINCOUNT = aten.bincount.default
_REPEAT_INTERLEAVE = aten.repeat_interleave.Tensor
_MASKS = (torch.bool, torch.uint8)
_PUTS = frozenset({aten.index_put.default, aten.index_put_.default, aten._index_put_impl_.default})

_DYNAMIC_SHAPE = {
    aten.nonzero.default,
    aten._unique.default,
    aten._unique2.default,
    aten.unique_dim.default,
    aten.unique_consecutive.default,
    aten.unique_dim_consecutive.default,
    _BINCOUNT,
    _REPEAT_INTERLEAVE,
}


# ops whose outputs hold only values of their first input (or of the tensors in it): a
# selection, view or copy; where the input's values are known but the output's are not (an
# index computed from the model), the output's values are still among the input's
MOVES_VALUES = frozenset(
    {
        *("index", "index_select", "gather", "take", "select", "slice", "narrow", "unbind"),
        *("split", "split_with_sizes", "view", "_unsafe_view", "reshape", "expand", "alias"),
        *("permute", "t", "transpose", "squeeze", "unsqueeze", "flatten", "clone", "detach"),
        *("contiguous", "cat", "repeat", "roll", "flip", "lift_fresh"),
    }
)


# ops whose outputs' values do not depend on their first input's values, only on its shape
# and dtype (``full_like(scores, label)``: a detector's labels, one per candidate box)
SHAPE_ONLY = frozenset(
    {"full_like", "zeros_like", "ones_like", "new_full", "new_zeros", "new_ones"}
)


def has_mask(indices: Any) -> bool:
    """Whether an ``index`` call's indices hold a boolean (or byte) mask."""
    return any(isinstance(i, torch.Tensor) and i.dtype in _MASKS for i in indices)


def _positions(indices: list[torch.Tensor | None]) -> list[torch.Tensor | None]:
    """``indices`` with each mask replaced by the positions of its true elements, one index
    per dimension it covers, as ATen's ``expandTensors`` does."""
    positions: list[torch.Tensor | None] = []
    for index in indices:
        if isinstance(index, torch.Tensor) and index.dtype in _MASKS:
            found = aten.nonzero.default(index)
            positions.extend(aten.select.int(found, 1, j) for j in range(index.dim()))
        else:
            positions.append(index)
    return positions


def index_by_positions(source: torch.Tensor, indices: list[torch.Tensor | None]) -> Any:
    """``source[indices]`` by the masks' positions. Run it under the trace's dispatch mode:
    ``nonzero`` and ``index`` then each pass through the mode."""
    return INDEX(source, _positions(indices))


def puts_by_positions(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether CUDA runs this ``index_put`` by its masks' positions. Not where a single mask
    is put a one-element value without accumulating: ATen runs that as ``masked_fill_``
    (``canDispatchToMaskedFill``; ``x[mask] = 0.0`` passes the value as a host scalar)."""
    if func not in _PUTS or not has_mask(args[1]):
        return False
    accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
    masks = [i for i in args[1] if i is not None]
    return bool(accumulate) or len(masks) > 1 or args[2].numel() != 1


def put_by_positions(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The ``index_put`` call by the masks' positions, under the trace's dispatch mode; the
    out-of-place one clones first, as ATen's ``index_put`` does before ``index_put_``."""
    if func is aten.index_put.default:
        out = aten.clone.default(args[0], memory_format=torch.preserve_format)
        return aten.index_put_.default(out, _positions(args[1]), *args[2:], **kwargs)
    return func(args[0], _positions(args[1]), *args[2:], **kwargs)


def select_by_positions(source: torch.Tensor, mask: torch.Tensor) -> Any:
    """``masked_select`` as CUDA runs it: both broadcast, then indexed by the mask."""
    if mask.dim() == 0:
        mask = aten.unsqueeze.default(mask, 0)
    if source.dim() == 0:
        source = aten.unsqueeze.default(source, 0)
    shape = torch.broadcast_shapes(mask.shape, source.shape)
    mask = aten.expand.default(mask, list(shape))
    source = aten.expand.default(source, list(shape))
    return index_by_positions(source, [mask])


def _empty(shape: tuple[int, ...] | torch.Size, dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(tuple(shape), dtype=dtype, device="meta")


def display_name(func: Any) -> str:
    """The op's name as users call it: ``unique`` for ``_unique2``."""
    name: str = func.overloadpacket.__name__
    return "unique" if "unique" in name else name


def is_dynamic(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether this call's output shape depends on values (``repeat_interleave`` given its
    ``output_size`` does not)."""
    if func not in _DYNAMIC_SHAPE:
        return False
    return func is not _REPEAT_INTERLEAVE or _bound_args(func, args, kwargs)["output_size"] is None


def largest(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], distinct: int | None = None
) -> tuple[Any, str]:
    """The largest outputs ``func`` gives for any values of its inputs, as meta tensors, and
    how they were bounded (for the estimate's notes). ``distinct``: how many values the input
    can hold at most, where known (labels gathered from a known ``arange``). Raises where no
    shape bounds the outputs."""
    if func in (_BINCOUNT, _REPEAT_INTERLEAVE):
        name = func.overloadpacket.__name__
        way_out = (
            "give output_size= to repeat_interleave"
            if func is _REPEAT_INTERLEAVE
            else "count into a tensor of a fixed size instead (zeros(n).index_add_(0, input, ones))"
        )
        raise RuntimeError(
            f"{name}'s output size depends on values memfit does not have (they come from "
            f"the model's weights or outputs, not from the batch alone) and no shape bounds "
            f"it: {way_out}."
        )
    params = _bound_args(func, args, kwargs)
    src = params["self"]
    n = src.numel()
    if func is aten.nonzero.default:
        return _empty((n, src.dim()), torch.long), "every element nonzero"
    if params.get("dim") is None:  # _unique, _unique2, unique_consecutive
        how = "every element distinct"
        if distinct is not None and distinct < n:
            n, how = distinct, f"each of the {distinct} values its input can hold"
        inverse = src.shape if params.get("return_inverse") else (0,)
        outs = [_empty((n,), src.dtype), _empty(inverse, torch.long)]
        if func is not aten._unique.default:
            outs.append(_empty((n,) if params.get("return_counts") else (0,), torch.long))
        return tuple(outs), how
    rows = src.size(params["dim"])  # unique_dim, unique_dim_consecutive, with a dim
    outs = [_empty(src.shape, src.dtype), _empty((rows,), torch.long)]
    return (*outs, _empty((rows,), torch.long)), "every slice distinct"


# CUDA's unique (cuda/Unique.cu) writes the distinct values into an input-sized buffer and
# then resizes it to their count, which keeps the storage: the values hold the input's bytes
# (H100 traces, torch 2.11: 8,192,000 bytes for 4,096,000 bfloat16 elements of few values)
_INPUT_SIZED_VALUES = frozenset(
    {aten._unique.default, aten._unique2.default, aten.unique_consecutive.default}
)


def keep_capacity(func: Any, args: tuple[Any, ...], result: Any) -> None:
    """Give ``result``'s tensors (meta, sized from known values) the storage CUDA leaves
    them: the values of a unique as many bytes as its input (:data:`_INPUT_SIZED_VALUES`)."""
    if func not in _INPUT_SIZED_VALUES or not isinstance(result, tuple):
        return
    values, src = result[0], args[0]
    size = src.numel() * values.element_size()
    if values.device.type == "meta" and values.untyped_storage().nbytes() < size:
        storage = torch.UntypedStorage(size, device="meta")
        values.set_(storage, 0, values.shape, values.stride())


def sized_by_known(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], known: dict[int, torch.Tensor]
) -> Any | None:
    """The outputs (meta tensors without values) of an op whose shape depends only on
    arguments whose values are ``known`` (by position): ``bincount`` sizes its output from
    its input, whatever the weights. None where that is not the case."""
    if func is not _BINCOUNT or 0 not in known:
        return None
    params = _bound_args(func, args, kwargs)
    weights = params.get("weights")
    stand_in = None if weights is None else torch.zeros(weights.shape, dtype=weights.dtype)
    real = torch.bincount(known[0], stand_in, params.get("minlength", 0))
    return _empty(real.shape, real.dtype)


def _bound_args(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The op's arguments by name, defaults included."""
    bound: dict[str, Any] = {}
    for i, arg in enumerate(func._schema.arguments):
        if i < len(args):
            bound[arg.name] = args[i]
        elif arg.name in kwargs:
            bound[arg.name] = kwargs[arg.name]
        elif arg.has_default_value():
            bound[arg.name] = arg.default_value
    return bound
