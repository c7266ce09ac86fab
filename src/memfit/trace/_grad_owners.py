"""Which autograd node made each gradient: where the GPU's backward works in place.

The autograd engine and some backward formulas write in place into a tensor that only they
hold (a buffered gradient, zeros a node just made); under any Python dispatch mode, the trace
included, they take their out-of-place forms instead, and the trace would allocate tensors the
GPU never does. :class:`GradOwners` remembers the node that allocated each storage during a
backward, and answers the recorder's three questions about them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["GradOwners"]

_ZEROS = frozenset({"zeros", "zeros_like", "new_zeros"})


def _sole_owner(t: torch.Tensor) -> bool:
    """Not a view of another tensor's storage, and non-overlapping and dense: what the
    autograd engine adds into in place."""
    if t._base is not None or (0 in t.stride() and t.numel() > 1):
        return False
    return t.is_contiguous() or t.is_contiguous(memory_format=torch.channels_last)


def _key(t: torch.Tensor) -> int:
    return int(t.untyped_storage()._cdata)


class GradOwners:
    """Storage key -> the autograd node that allocated it, for storages made in a backward;
    ``made_by_op`` names the op that allocated a tensor's storage (None: not recorded)."""

    def __init__(self, made_by_op: Callable[[torch.Tensor], str | None]) -> None:
        self._nodes: dict[int, int] = {}
        self._made_by_op = made_by_op

    def allocated(self, key: int) -> None:
        """A storage was allocated in a backward phase: remember the node running, if any."""
        node = torch._C._current_autograd_node()
        if node is not None:
            self._nodes[key] = node._sequence_nr()

    def freed(self, key: int) -> None:
        self._nodes.pop(key, None)

    def fresh(
        self,
        phase: str,
        zeros: Any,
        zeros_only: bool = False,
        nodes: frozenset[str] = frozenset(),
    ) -> bool:
        """Whether ``zeros`` was made by the backward node now running (one of ``nodes``, if
        given) and nothing else holds its storage (and, if ``zeros_only``, was made as zeros):
        what a backward formula writes into in place on the GPU, where the trace (a dispatch
        mode) sees its out-of-place form (``_backward_fills``). H100 traces,
        torch 2.11: ``max(dim)``'s backward allocates one input-sized gradient, not two.
        Formulas that scatter out of place into a tensor they made otherwise
        (``scatter_reduce``'s, which keeps it) are left as they are."""
        if torch.is_grad_enabled() or not phase.endswith("backward"):
            return False
        node = torch._C._current_autograd_node()
        if node is None or not isinstance(zeros, torch.Tensor) or zeros.device.type != "meta":
            return False
        if nodes and node.name() not in nodes:
            return False
        if self._nodes.get(_key(zeros)) != node._sequence_nr() or not _sole_owner(zeros):
            return False
        return not zeros_only or self._made_by_op(zeros) in _ZEROS

    def scatters_into_fresh_zeros(
        self, phase: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> bool:
        """Whether this ``index_put`` is the backward of an advanced-index gather (``x[idx]``,
        the per-expert inputs of mixture-of-experts layers), which the GPU runs in place.

        ``index_backward`` (FunctionsManual.cpp) scatters the gradient into the zeros it was
        given with ``_index_put_impl_(zeros, indices, grad, accumulate=true, unsafe=true)``,
        unless a tensor is "subclass-like", which any Python dispatch mode makes them all: then
        it calls the out-of-place ``index_put``, and the trace would allocate a second
        input-sized tensor per gather (a Qwen2-MoE-style model on an H200: one (tokens*top_k,
        hidden) float32 tensor per MoE layer that the GPU never allocates).
        """
        accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
        return bool(accumulate) and self.fresh(phase, args[0])

    def accumulates_in_place(
        self, phase: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> bool:
        """Whether this ``add`` is the autograd engine summing two gradients of one input into
        the one it buffered first, which a real run does in place.

        The engine adds in place only into the buffered gradient (made by an earlier node, or
        by this one where it returns two gradients of one input), and only when it holds the
        only reference to it, storage and all (input_buffer.cpp); else the sum is a new tensor,
        even where the arriving gradient is one it could have reused. A view (which shares its
        base's storage) is never added into: the input gradient of a linear layer without a
        bias, reshaped back to 3-d, as Llama's projections deliver it (TinyLlama on an H200:
        one sum per attention block and one per MLP), and the weight gradient of an output
        layer tied to the embedding (Qwen2.5-0.5B on an H200: one vocabulary-sized sum per
        backward). Under any Python dispatch mode, this mode included, the engine takes the
        out-of-place path, so the trace would allocate a gradient-sized tensor per junction
        (every residual connection) that the GPU never allocates.
        """
        if torch.is_grad_enabled() or kwargs or len(args) != 2 or not phase.endswith("backward"):
            return False
        old, new = args
        if not (isinstance(old, torch.Tensor) and isinstance(new, torch.Tensor)):
            return False
        if old.shape != new.shape or old.dtype != new.dtype or old.device.type != "meta":
            return False
        node = torch._C._current_autograd_node()
        if node is None:
            return False
        made_by = self._nodes.get(_key(old))
        if made_by is None:
            return False  # not the engine's buffer
        if made_by == node._sequence_nr() and not _feeds_one_input_twice(node):
            return False  # the node's own formula adding two of its results
        return _sole_owner(old)


def _feeds_one_input_twice(node: Any) -> bool:
    """Whether two of ``node``'s gradients go to the same input of the same next node (``d *
    d``): the engine sums them into its buffer, in place, as the node returns them, so an add
    of two of its own results may be the engine's. H100 op sweep, torch 2.11: ``masked.var``'s
    backward adds its squared difference's two gradients in place."""
    edges = [(id(fn), nr) for fn, nr in node.next_functions if fn is not None]
    return len(edges) != len(set(edges))
