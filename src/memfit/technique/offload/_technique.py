"""``offload``: activation offload through the technique hooks. It is asked for by the workload's
own settings (``offload=`` a share of the blocks, ``offload_checkpoints=``), not by
``techniques=``; its hooks wrap the blocks before the optimizer is made, give a trace the
observer of its copies with its note, and refuse a model compiled as a whole."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memfit.technique._base import Option, Place, Settings, Technique, Undo

if TYPE_CHECKING:
    from torch import nn

__all__ = ["CHECKPOINTS_WORDS", "TECHNIQUE", "Offload", "offload_words"]

CHECKPOINTS_WORDS = "checkpointed blocks' inputs offloaded"


def offload_words(share: float, checkpoints: bool = False) -> str:
    """Activation offload in words: the share of the blocks not checkpointed, then whether the
    checkpointed blocks' inputs go too (``""``: no offload)."""
    rest = "the blocks not checkpointed"
    parts = []
    if share:
        of = rest if share >= 1 else f"{share:.0%} of {rest}"
        parts.append(f"activation offload of {of}")
    if checkpoints:
        parts.append(CHECKPOINTS_WORDS)
    return ", ".join(parts)


class Offload(Technique):
    """Activation offload (see the package's docstring); its value is ``(share, checkpoints)``:
    the share of the blocks memfit does not checkpoint, and whether the checkpointed blocks'
    inputs go too."""

    name = "offload"
    option = Option(keyword="offload", flag="", kind=float, help="")
    default = None

    given_as = (
        "activation offload",
        "offload=SHARE (a share of the blocks, or True for every one) and, for the "
        "checkpointed blocks' inputs, offload_checkpoints=True",
    )

    def given_by(self, settings: Settings) -> Any:
        share, checkpoints = settings.offload, settings.offload_checkpoints
        return (share, checkpoints) if share or checkpoints else None

    def refusal(self, value: Any, settings: Settings) -> str | None:
        share, checkpoints = value
        if share:
            why = _share_ignored(settings)
            if why:
                return (
                    f"offload={share!r} would be ignored here: {why}. Offload copies what a "
                    "training step's blocks save for the backward to pinned host memory; drop "
                    "it, or estimate an eager model's training step with it."
                )
        why = _checkpoints_ignored(settings) if checkpoints else ""
        if why:
            return (
                f"offload_checkpoints=True would be ignored here: {why}. It offloads the inputs "
                "checkpointed blocks keep for their recompute; drop it, or estimate a training "
                "step that checkpoints its blocks."
            )
        return None

    def notes(self, value: Any, settings: Settings, optimizer: Any) -> list[str]:
        checkpoints = value[1]
        if (
            checkpoints
            and settings.activation_checkpointing is True
            and settings.enable_checkpointing is not None
        ):
            return [
                "offload_checkpoints: the blocks are checkpointed by memfit's wrapper in place "
                "of the model's own switch (whose checkpoint runs outside the forward the "
                "offload wraps); memfit.apply does the same"
            ]
        return []

    def refusal_compiled(self, value: Any) -> str | None:
        return (
            f"offload={value[0]!r} cannot be estimated for a torch.compile'd model: what its "
            "forward saves is inductor's plan, which saved-tensor hooks do not see as eager "
            "blocks do. Drop offload (activation_memory_budget= trades memory for recompute in "
            "a compiled model), or estimate the model uncompiled (compiled='eager')."
        )

    def words(self, value: Any) -> str:
        share, checkpoints = value
        words = offload_words(share, checkpoints)
        if not share:  # the inputs alone: say what the offload is
            words = f"activation offload: {words}"
        return f"{words}, to pinned host memory (memfit's)"

    def refusal_live(self, value: Any, model: nn.Module) -> str | None:
        from memfit.technique.checkpointing import checkpointing_on, find_blocks
        from memfit.technique.offload._offload import offloader_of

        name = type(model).__name__
        if offloader_of(model) is not None:
            return (
                f"The plan offloads activations, but {name} already has memfit's activation "
                "offload on; remove it (.remove() on the handle offload_activations returned) "
                "before memfit.apply. Nothing was changed."
            )
        if checkpointing_on(model):
            return (
                f"The plan offloads activations, but {name} has its own gradient checkpointing "
                "switched on, whose checkpoint runs outside the forward memfit's offload wraps. "
                "Switch it off (gradient_checkpointing_disable()) and apply the plan again: it "
                "checkpoints the blocks itself. Nothing was changed."
            )
        find_blocks(model)  # refuses a model without repeated blocks
        return None

    def apply(self, value: Any, model: nn.Module, optimizer: Any, place: Place) -> Undo:
        from memfit.technique.offload._offload import offload_blocks

        share, checkpoints = value
        return offload_blocks(model, share, checkpoints=checkpoints).remove

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


_INFERENCE = "inference saves no activations for a backward"
_COMPILED = "a compiled model's saved tensors are inductor's, not autograd's hooks'"


def _share_ignored(settings: Settings) -> str:
    """Why offloading a share of the blocks would do nothing with these settings ("": it
    would not)."""
    if settings.mode == "infer":
        return _INFERENCE
    checkpointing = settings.activation_checkpointing
    if checkpointing is True or checkpointing == "selective":
        return (
            "every block is checkpointed (it saves only its inputs): offload those inputs "
            "with offload_checkpoints=True, or give a share of the blocks to checkpoint, e.g. "
            "activation_checkpointing=0.5, and the others are offloaded"
        )
    return _COMPILED if settings.activation_memory_budget is not None else ""


def _checkpoints_ignored(settings: Settings) -> str:
    """Why offloading the checkpointed blocks' inputs would do nothing ("": it would not)."""
    if settings.mode == "infer":
        return _INFERENCE
    if settings.activation_memory_budget is not None:
        return _COMPILED
    if not settings.activation_checkpointing:
        return (
            "no block is checkpointed (give activation_checkpointing=True, 'selective' or a "
            "share such as 0.5)"
        )
    return ""


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
