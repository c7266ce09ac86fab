"""``offload``: activation offload through the technique hooks. It is asked for by the workload's
own settings (``offload=`` a share of the blocks, ``offload_checkpoints=``), not by
``techniques=``; its hooks wrap the blocks before the optimizer is made, give a trace the
observer of its copies with its note, and refuse a model compiled as a whole."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memfit._errors import InvalidInputError
from memfit.technique._base import Option, Place, Settings, Technique

if TYPE_CHECKING:
    from torch import nn

__all__ = ["TECHNIQUE", "Offload"]


class Offload(Technique):
    """Activation offload (see the package's docstring); its value is ``(share, checkpoints)``:
    the share of the blocks memfit does not checkpoint, and whether the checkpointed blocks'
    inputs go too."""

    name = "offload"
    option = Option(keyword="offload", flag="", kind=float, help="")
    default = None

    def check(self, value: object) -> Any:
        raise InvalidInputError(
            f"techniques={{'offload': {value!r}}}: activation offload is asked for by its own "
            "settings; give offload=SHARE (a share of the blocks, or True for every one) and, "
            "for the checkpointed blocks' inputs, offload_checkpoints=True."
        )

    def given_by(self, settings: Settings) -> Any:
        share, checkpoints = settings.offload, settings.offload_checkpoints
        return (share, checkpoints) if share or checkpoints else None

    def refusal_compiled(self, value: Any) -> str | None:
        return (
            f"offload={value[0]!r} cannot be estimated for a torch.compile'd model: what its "
            "forward saves is inductor's plan, which saved-tensor hooks do not see as eager "
            "blocks do. Drop offload (activation_memory_budget= trades memory for recompute in "
            "a compiled model), or estimate the model uncompiled (compiled='eager')."
        )

    def prepare(self, value: Any, model: nn.Module, settings: Settings) -> nn.Module:
        from memfit.technique.offload._offload import offload_blocks

        share, checkpoints = value
        offload_blocks(model, share, checkpoints=checkpoints)
        return model

    def engage(self, value: Any, model: nn.Module, optimizer: Any, place: Place) -> Any:
        from memfit.technique.offload._offload import offloader_of

        offload = offloader_of(model)
        if offload is not None:
            counts = (len(offload.offloaded), len(offload.blocks), len(offload.checkpointed))
            offload.observer = place.copies(lambda most: _note(*counts, most))
        return optimizer


def _note(offloaded: int, blocks: int, checkpointed: int, most: int) -> str:
    """What the offload of ``offloaded`` of ``blocks`` blocks (``checkpointed`` of them
    checkpointed: their inputs only) asked of the host, ``most`` pinned bytes at once."""
    from memfit._units import format_bytes

    others = offloaded - checkpointed
    parts = [
        f"the inputs of {checkpointed} checkpointed blocks" if checkpointed else "",
        f"what {others} {'other ' if checkpointed else ''}blocks save" if others else "",
    ]
    what = " and ".join(part for part in parts if part)
    return (
        f"activation offload: {what} (of {blocks} blocks) wait in pinned host memory between "
        f"forward and backward, {format_bytes(most)} of it at once (PyTorch's pinned "
        "allocator rounds each tensor up to a power of two); the copies run on a side stream"
    )


TECHNIQUE = Offload()
