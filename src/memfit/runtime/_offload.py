"""``memfit.offload_activations``: activation offload on a user's own model, outside a plan."""

from __future__ import annotations

from torch import nn

from memfit._errors import InvalidInputError
from memfit.technique.offload import (
    MIN_OFFLOAD_BYTES,
    ActivationOffload,
    check_offload,
    offload_blocks,
)

__all__ = ["offload_activations"]


def offload_activations(
    model: nn.Module,
    share: float = 1.0,
    *,
    checkpoints: bool = False,
    min_bytes: int = MIN_OFFLOAD_BYTES,
) -> ActivationOffload:
    """Offload what ``share`` of ``model``'s repeated blocks save for the backward to pinned
    host memory, from the next forward on; returns the offload, whose ``remove()`` (or a
    ``with`` block) takes it off.

    ``checkpoints=True`` offloads the inputs of the blocks memfit checkpoints too (what a
    checkpointed block keeps for its recompute): below full checkpointing's memory, for one
    hidden state's copy a block (``share=0`` offloads those alone).

    The blocks are the ones activation checkpointing would wrap (a transformers model's
    layers, timm's and torchvision's blocks), spread evenly; blocks memfit checkpoints are
    left out of ``share`` (their inputs go with ``checkpoints=True``). Pinned host memory is
    counted as it is taken: a copy that would leave the host less than 1 GiB free raises
    :class:`memfit.HostMemoryError` instead. Saved tensors smaller than ``min_bytes``,
    parameters and tensors that are not dense stay on the GPU. The copies run on a side
    stream and come back one block ahead of the backward: the gradients are the ones
    computed without offload, and memfit's estimate
    with ``offload=share`` is what the GPU then allocates (``memfit.estimate(...,
    offload=share)``). It costs step time where the copies (about 55 GB/s each way on an H200)
    outlast the compute they run under: estimate both, or let ``memfit.plan`` choose.

    Example::

        offload = memfit.offload_activations(model, 0.5)
        loss = model(**batch).loss
        loss.backward()
        offload.remove()
    """
    value = check_offload(share)
    if not isinstance(checkpoints, bool):
        raise InvalidInputError(
            f"checkpoints={checkpoints!r} is not True or False: give True to offload the "
            "inputs of the blocks memfit checkpoints too."
        )
    if not value and not checkpoints:
        raise InvalidInputError(
            f"share={share!r} offloads nothing: give a share of the blocks above 0, e.g. 1.0 "
            "(every block) or 0.5, or checkpoints=True (the checkpointed blocks' inputs)."
        )
    if isinstance(min_bytes, bool) or not isinstance(min_bytes, int) or min_bytes < 0:
        raise InvalidInputError(
            f"min_bytes={min_bytes!r} is not a size in bytes: give a whole number >= 0, e.g. "
            f"min_bytes={MIN_OFFLOAD_BYTES} (the default: smaller saved tensors stay)."
        )
    return offload_blocks(model, value, checkpoints=checkpoints, min_bytes=min_bytes)
