"""A technique asked for by the optimizer's name rather than by ``techniques=``: its value is
that name (``adamw-in-backward``, ``adamw-8bit``), it has no flag of its own, and
``techniques=`` given it is refused with the name to give instead."""

from __future__ import annotations

from typing import Any

from memfit._errors import InvalidInputError
from memfit.technique._base import Option, Settings, Technique

__all__ = ["OptimizerVariant", "check_fusable", "element_bytes"]


def element_bytes(precision: str) -> int:
    """Bytes per element of the parameters, their gradients and Adam's states at
    ``precision``: two in pure bf16/fp16, four otherwise (mixed precision keeps fp32 ones)."""
    return 2 if precision in ("bf16", "fp16") else 4


class OptimizerVariant(Technique):
    """A variant of the optimizer, named by the suffix of its name (``suffix``: ``-8bit``).

    The planner offers it (:meth:`offered`) beside its family's plain optimizers and, unless
    only variants are given, searches it after the micro-batch bisections, only where its
    :meth:`~memfit.technique.Technique.saving` could make a step fit: one that ``accumulates``
    at the largest micro-batch found too large by no more than it saves, one that does not at
    the whole global batch."""

    suffix = ""
    default = None
    steps_in_backward = False  # its updates run inside backward, not in an optimizer phase
    # its gradients add up over micro-batches as the plain optimizer's do; False: it steps at
    # every micro-batch, so a plan tries it at the whole global batch only
    accumulates = True
    # the variant in the planner's words: its progress ("... searched") and its messages
    searched_words = ""
    # memfit.apply changes the user's live optimizer for it (``apply``); otherwise the
    # optimizer the user built runs it as it is (``check_live`` says whether it can)
    changes_live = False

    def offered(self, family: str, settings: Settings) -> tuple[str, ...]:
        """The optimizer names of this variant a plan tries by default for the optimizer
        ``family`` (``adamw``) of the workload ``settings``; none by default."""
        return ()

    def state_bytes(self, value: str, param_bytes: int) -> int:
        """Bytes per element of each of the optimizer's states (Adam's two) with the variant
        ``value``, where the parameters take ``param_bytes``: theirs by default."""
        return param_bytes

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
