"""What CUDA's reduced losses allocate that their meta kernels do not.

A loss with ``reduction="mean"`` or ``"sum"`` returns a scalar, and its meta kernel allocates
only that. On the GPU (ATen's Loss.cpp and Loss.cu, torch 2.11) each first writes the
unreduced loss, one element per input element, then reduces it with ``mean`` or ``sum``
(whose reduction kernel takes its own partial results and semaphores):

* ``mse_loss``, ``smooth_l1_loss`` (structured kernels): the output is made at the inputs'
  broadcast size and resized down to a scalar, which keeps its storage; the unreduced loss
  is a second tensor of that size, reduced into the output and freed;
* ``soft_margin_loss``, ``binary_cross_entropy``: the unreduced loss is written into the output,
  reduced into a new scalar, and the output resized down to it (its storage kept) and copied;
* ``huber_loss``: the unreduced loss is a temporary made before the scalar output, freed when
  the call returns;
* ``binary_cross_entropy_with_logits``: ``log_sigmoid(input)`` and the unreduced loss (with a
  ``pos_weight``, its broadcast ``(pos_weight - 1) * target`` too, counted until the call
  returns though CUDA frees it before the loss is made), made before the scalar output.

``multi_margin_loss`` (MultiMarginCriterion.cu) reduces a batch of rows through a per-row
loss, made after the scalar output and summed into it (``multilabel_margin_loss``'s own
order: ``_cuda_composites``).

``log_sigmoid_forward``'s second output, a buffer its CPU kernel fills, is empty on CUDA.

The scalar a user holds (``loss``) thus keeps a storage of the input's size in the first two
cases until it is freed: H100 op sweep, 512,000 float32 elements: 2,048,000 bytes beside the
loss for ``mse_loss`` and ``binary_cross_entropy``, kept through the backward pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from memfit.trace._scratch import Scratch

__all__ = ["LOSS_OPS", "log_sigmoid_output", "loss_copies", "loss_output", "loss_scratch"]

aten = torch.ops.aten

Reduction = Callable[[torch.Tensor, Any], list[tuple[int, str]]]

_RESIZED = frozenset({aten.mse_loss.default, aten.smooth_l1_loss.default})  # two full tensors
_IN_PLACE = frozenset({aten.soft_margin_loss.default, aten.binary_cross_entropy.default})
_BEFORE = frozenset({aten.huber_loss.default, aten.binary_cross_entropy_with_logits.default})
_PER_ROW = {aten.multi_margin_loss.default: 5}
LOSS_OPS = frozenset({*_RESIZED, *_IN_PLACE, *_BEFORE, *_PER_ROW})

_REDUCTION_ARG = 2  # (input, target, reduction, ...) for all but binary_cross_entropy
_MEAN, _SUM = 1, 2


def _reduction(func: Any, args: tuple[Any, ...]) -> int:
    i = _PER_ROW.get(func, _REDUCTION_ARG)
    if func is aten.binary_cross_entropy.default:
        i = 3
    elif func is aten.binary_cross_entropy_with_logits.default:
        i = 4
    return int(args[i]) if len(args) > i else _MEAN


def _reduced(func: Any, args: tuple[Any, ...]) -> bool:
    """Whether the call reduces (and so is modelled): ``smooth_l1_loss`` with ``beta=0`` runs
    ``l1_loss`` instead, left as traced."""
    if func not in LOSS_OPS or _reduction(func, args) not in (_MEAN, _SUM):
        return False
    if func is aten.smooth_l1_loss.default and len(args) > 3 and float(args[3]) == 0.0:
        return False
    return isinstance(args[0], torch.Tensor) and isinstance(args[1], torch.Tensor)


def _unreduced(func: Any, args: tuple[Any, ...], out: torch.Tensor) -> torch.Tensor:
    """A meta tensor shaped as the unreduced loss: the inputs' broadcast shape for the
    structured losses, the input's for the others, of the output's dtype."""
    x, y = args[0], args[1]
    shape = torch.broadcast_shapes(x.shape, y.shape) if func in _RESIZED else x.shape
    with torch._C.DisableTorchFunction():
        return torch.empty(shape, dtype=out.dtype, device="meta")


def loss_output(func: Any, args: tuple[Any, ...], out: Any) -> Any:
    """The scalar output on a storage of the unreduced loss's size, where CUDA resizes the
    unreduced output down to it (module doc); ``out`` itself otherwise."""
    if func not in _RESIZED and func not in _IN_PLACE:
        return out
    if not isinstance(out, torch.Tensor) or out.dim() != 0 or not _reduced(func, args):
        return out
    full = _unreduced(func, args, out)
    with torch._C.DisableTorchFunction():
        return full.view(-1)[0] if full.numel() else out


def loss_copies(func: Any, args: tuple[Any, ...]) -> list[tuple[int, str]]:
    """What ``huber_loss`` and ``binary_cross_entropy_with_logits`` make before their scalar
    output (module doc)."""
    if func not in _BEFORE or not _reduced(func, args):
        return []
    x = args[0]
    size = x.numel() * x.element_size()
    if func is aten.huber_loss.default:
        return [(size, "huber loss unreduced")]
    copies = [(size, "log_sigmoid of the logits")]
    pos_weight = args[3] if len(args) > 3 else None
    if isinstance(pos_weight, torch.Tensor):
        shape = torch.broadcast_shapes(pos_weight.shape, args[1].shape)
        weights = pos_weight.numel() * pos_weight.element_size()
        copies += [(weights, "pos_weight - 1"), (_numel(shape) * x.element_size(), "log weight")]
    return [*copies, (size, "binary cross entropy unreduced")]


def _numel(shape: torch.Size) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def loss_scratch(func: Any, args: tuple[Any, ...], reduce: Reduction) -> list[list[Scratch]]:
    """After the output: the unreduced loss (structured losses) or the reduced scalar (losses
    written in place), then the reduction's own scratch (``reduce`` of the unreduced loss over
    all its dimensions), freed last made first."""
    if not _reduced(func, args):
        return []
    x = args[0]
    if func in _PER_ROW:
        if x.dim() != 2:
            return []  # a single row: reduced by the kernel itself
        with torch._C.DisableTorchFunction():
            rows = torch.empty((int(x.shape[0]),), dtype=x.dtype, device="meta")
        per_row: list[Scratch] = [(rows.numel() * rows.element_size(), "margin loss per row")]
        return [per_row + reduce(rows, None)]
    dtype = x.dtype
    if func in _RESIZED:
        dtype = torch.promote_types(x.dtype, args[1].dtype)
    with torch._C.DisableTorchFunction():
        probe = torch.empty((), dtype=dtype, device="meta")
    full = _unreduced(func, args, probe)
    group: list[Scratch] = []
    if func in _RESIZED:
        group.append((full.numel() * full.element_size(), "loss unreduced"))
    elif func in _IN_PLACE:
        group.append((full.element_size(), "loss reduced"))
    group += reduce(full, None)  # the others' scalar output is the reduction's own
    return [group]


def log_sigmoid_output(func: Any, out: Any) -> Any:
    """``log_sigmoid_forward``'s (output, buffer) with the buffer empty, as CUDA returns it
    (Activation.cu; H100 op sweep: one input-sized tensor, not two)."""
    if func is not aten.log_sigmoid_forward.default or not isinstance(out, tuple):
        return out
    buffer = out[1]
    with torch._C.DisableTorchFunction():
        return (out[0], torch.empty(0, dtype=buffer.dtype, device="meta"))
