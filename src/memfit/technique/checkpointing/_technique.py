"""``checkpointing``: activation checkpointing through the technique hooks. It is asked for by
the workload's own setting (``activation_checkpointing=``), not by ``techniques=``; its value is
``(setting, wrapped)``: the setting (True, ``"selective"`` or a share of the blocks) and whether
memfit's wrapping of the blocks does it where the model has a switch of its own (activation
offload of the checkpointed blocks' inputs wraps that wrapping in turn)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memfit._errors import InvalidInputError
from memfit.technique._base import Option, Place, Settings, Technique, Undo

if TYPE_CHECKING:
    from torch import nn

    from memfit.technique.checkpointing._live import LiveCheckpointing

__all__ = ["TECHNIQUE", "Checkpointing", "checkpointing_words", "wrapped"]


def checkpointing_words(value: bool | str | float) -> str:
    """``activation_checkpointing``'s value in words: ``full checkpointing``, ``checkpointing
    of 42% of the blocks``..."""
    if isinstance(value, float):
        return f"checkpointing of {value:.0%} of the blocks"
    if value is True or value is False:
        return "full checkpointing" if value else "no checkpointing"
    return f"{value} checkpointing"


def wrapped(setting: bool | str | float, own_switch: bool, inputs_offloaded: bool) -> bool:
    """Whether memfit's wrapping of the blocks does ``setting``: always but for full
    checkpointing, which the model's own switch does where it may have one (``own_switch``),
    unless the checkpointed blocks' inputs are offloaded (that offload wraps memfit's
    wrapping)."""
    return setting is not True or not own_switch or inputs_offloaded


class Checkpointing(Technique):
    """Activation checkpointing (see the package's docstring)."""

    name = "checkpointing"
    option = Option(keyword="checkpointing", flag="", kind=bool, help="")
    default = None

    given_as = (
        "activation checkpointing",
        "activation_checkpointing=True (every block), 'selective' or a share of the blocks "
        "such as 0.5",
    )

    def given_by(self, settings: Settings) -> Any:
        setting = settings.activation_checkpointing
        if not setting:
            return None
        return (
            setting,
            wrapped(
                setting, settings.enable_checkpointing is not None, settings.offload_checkpoints
            ),
        )

    def prepare(self, value: Any, model: nn.Module, settings: Settings) -> nn.Module:
        from memfit.technique.checkpointing._blocks import checkpoint_blocks

        setting, wrapped = value
        if setting is True and not wrapped:
            settings.enable_checkpointing(model)  # the model's own switch
        elif setting is True:
            checkpoint_blocks(model, selective=False)
        elif setting == "selective":
            checkpoint_blocks(model)
        else:
            checkpoint_blocks(model, selective=False, fraction=setting)
        return model

    def words(self, value: Any) -> str:
        return checkpointing_words(value[0])

    def refusal_live(self, value: Any, model: nn.Module) -> str | None:
        try:
            self._live(value, model)
        except InvalidInputError as err:
            return str(err)
        return None

    def live_words(self, value: Any, model: nn.Module) -> str:
        return self._live(value, model).text

    def apply(self, value: Any, model: nn.Module, optimizer: Any, place: Place) -> Undo:
        return self._live(value, model).switch_on(model)

    @staticmethod
    def _live(value: Any, model: nn.Module) -> LiveCheckpointing:
        from memfit.technique.checkpointing._live import live_checkpointing

        setting, wrapped = value
        return live_checkpointing(setting, model, wrapped=wrapped)


TECHNIQUE = Checkpointing()
