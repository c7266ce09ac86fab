"""A technique asked for by the optimizer's name rather than by ``techniques=``: its value is
that name (``adamw-in-backward``, ``adamw-8bit``), it has no flag of its own, and
``techniques=`` given it is refused with the name to give instead."""

from __future__ import annotations

from typing import Any

from memfit._errors import InvalidInputError
from memfit.technique._base import Option, Settings, Technique

__all__ = ["OptimizerVariant", "check_fusable"]


class OptimizerVariant(Technique):
    """A variant of the optimizer, named by the suffix of its name (``suffix``: ``-8bit``)."""

    suffix = ""
    default = None
    steps_in_backward = False  # its updates run inside backward, not in an optimizer phase
    # memfit.apply changes the user's live optimizer for it (``apply``); otherwise the
    # optimizer the user built runs it as it is (``check_live`` says whether it can)
    changes_live = False

    @property
    def cost_key(self) -> str:
        """The calibration's key for the host's cost of one parameter tensor's update with
        this variant (``optimizer_param:<key>``): the suffix without its dash."""
        return self.suffix.removeprefix("-")

    def __init__(self) -> None:
        self.option = Option(keyword=self.name, flag="", kind=str, help="")

    def check(self, value: object) -> Any:
        raise InvalidInputError(
            f"techniques={{{self.name!r}: {value!r}}}: {self.name} is asked for by the "
            f"optimizer's name; give optimizer='adamw{self.suffix}' (or another optimizer's "
            f"name ending in {self.suffix})."
        )

    def make_optimizer(self, value: str, params: Any) -> Any:
        """The optimizer ``value`` names, made of ``params``; None: its family's own (``adamw``
        of ``adamw-in-backward``) with :meth:`optimizer_flags`."""
        return None

    def check_live(self, value: str, optimizer: Any) -> None:
        """Refuse a user's live optimizer that cannot run the variant ``value`` names (an
        ``InvalidInputError`` naming the fix), before ``memfit.apply`` changes anything."""

    def optimizer_flags(self, value: str) -> dict[str, Any]:
        """The flags the family's optimizer is made with for this variant."""
        return {}

    def given_by(self, settings: Settings) -> Any:
        optimizer = settings.optimizer
        named = isinstance(optimizer, str) and optimizer.endswith(self.suffix)
        return optimizer if named else None


def check_fusable(optimizer: Any, name: str) -> None:
    """Refuse an optimizer that cannot run fused (``name``: the plan's optimizer, which does):
    one built with ``differentiable=True``."""
    if any(group.get("differentiable") for group in optimizer.param_groups):
        raise InvalidInputError(
            f"The plan chooses {name}, which runs fused, but the optimizer was built with "
            "differentiable=True, which fused optimizers do not support: build it without "
            "differentiable=True, or plan with optimizers=... naming a foreach variant; "
            "nothing was changed."
        )
