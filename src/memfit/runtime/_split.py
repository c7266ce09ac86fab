"""Split a batch into micro-batches along its first dimension, and count its samples.

A batch is a tensor, a mapping (``dict``, Hugging Face ``BatchEncoding``), a tuple, named tuple or
list, nested in any way. Every tensor with at least one dimension holds one row per sample and is
split along dim 0; all of them must have the same number of rows. Anything else (strings, numbers,
``None``, 0-d tensors) is a constant and is given whole to every micro-batch: a per-sample list
of strings therefore needs a ``split_fn``. NumPy arrays are refused rather than copied, since
copying a per-sample array to every micro-batch would silently change the result.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from memfit._errors import InvalidInputError

__all__ = ["SplitFn", "batch_size", "parts_needed", "split_batch"]

SplitFn = Callable[[Any, int], Sequence[Any]]

_HINT = (
    "Give AutoMicrobatch a split_fn(batch, n) -> list of n batches and a size_fn(batch) -> "
    "number of samples for this batch type."
)


def _rows(batch: Any, path: str, found: dict[str, int]) -> None:
    """Record the dim-0 size of every tensor in ``batch`` under its path."""
    if isinstance(batch, torch.Tensor):
        if batch.dim() > 0:
            found[path or "batch"] = batch.shape[0]
    elif isinstance(batch, Mapping):
        for key, value in batch.items():
            _rows(value, f"{path}[{key!r}]", found)
    elif isinstance(batch, (tuple, list)):
        for i, value in enumerate(batch):
            _rows(value, f"{path}[{i}]", found)
    elif type(batch).__module__ == "numpy" and hasattr(batch, "shape"):
        raise InvalidInputError(
            f"The batch holds a NumPy array at {path or 'the top'}, which AutoMicrobatch does not "
            "split (copying it whole to every micro-batch would change the result). Convert it "
            f"with torch.from_numpy, or: {_HINT}"
        )


def batch_size(batch: Any) -> int:
    """The number of samples in ``batch``: the shared dim-0 size of its tensors.

    Raises :class:`~memfit.InvalidInputError` when the batch holds no tensor with a dimension, or
    when its tensors disagree on dim 0 (naming each tensor and its size).
    """
    found: dict[str, int] = {}
    _rows(batch, "", found)
    if not found:
        raise InvalidInputError(
            f"A batch of type {type(batch).__name__} cannot be split into micro-batches: it holds "
            "no tensor with a batch dimension (tensors, and dicts, tuples and lists of tensors "
            f"are split along dim 0). {_HINT}"
        )
    sizes = set(found.values())
    if len(sizes) > 1:
        listed = ", ".join(f"{path}: {size}" for path, size in list(found.items())[:6])
        raise InvalidInputError(
            "The batch's tensors disagree on their first dimension, so it cannot be split into "
            f"micro-batches by sample ({listed}). Every tensor with a dimension must have one row "
            f"per sample; move per-batch tensors out of it, make them 0-d, or: {_HINT}"
        )
    return sizes.pop()


def _rebuild(template: Any, parts: Any) -> Any:
    if isinstance(template, list):
        return parts
    if isinstance(template, tuple) and hasattr(template, "_fields"):
        return type(template)(*parts)  # a named tuple
    return type(template)(parts)


def _split(batch: Any, n: int) -> list[Any]:
    if isinstance(batch, torch.Tensor):
        if batch.dim() == 0:
            return [batch] * n
        return list(torch.tensor_split(batch, n, dim=0))
    if isinstance(batch, Mapping):
        columns = {key: _split(value, n) for key, value in batch.items()}
        return [_rebuild(batch, {k: c[i] for k, c in columns.items()}) for i in range(n)]
    if isinstance(batch, (tuple, list)):
        columns_seq = [_split(value, n) for value in batch]
        return [_rebuild(batch, [c[i] for c in columns_seq]) for i in range(n)]
    return [batch] * n


def split_batch(batch: Any, n: int) -> list[Any]:
    """Split ``batch`` into ``n`` micro-batches of near-equal size (they differ by one at most).

    Tensors are split with ``torch.tensor_split`` along dim 0, so the micro-batches are views and
    cost no memory; containers are rebuilt with their own type (``BatchEncoding`` stays one);
    constants are shared. ``n`` is capped by the number of samples: no micro-batch is empty.
    """
    if type(n) is not int or n < 1:
        raise InvalidInputError(
            f"A batch cannot be split into {n!r} micro-batches; give n as an int >= 1."
        )
    n = min(n, batch_size(batch))
    try:
        return _split(batch, n)
    except TypeError as exc:
        raise InvalidInputError(
            f"A micro-batch of the {type(batch).__name__} batch could not be rebuilt ({exc}): "
            f"its container type cannot be made from its split contents. {_HINT}"
        ) from None


def parts_needed(total: int, limit: int | None) -> int:
    """How many micro-batches a batch of ``total`` samples needs so none exceeds ``limit``."""
    if limit is None or total <= limit:
        return 1
    return math.ceil(total / limit)
