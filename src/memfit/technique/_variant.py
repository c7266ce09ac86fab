"""A technique asked for by the optimizer's name rather than by ``techniques=``: its value is
that name (``adamw-in-backward``, ``adamw-8bit``), it has no flag of its own, and
``techniques=`` given it is refused with the name to give instead."""

from __future__ import annotations

from typing import Any

from memfit._errors import InvalidInputError
from memfit.technique._base import Option, Settings, Technique

__all__ = ["OptimizerVariant"]


class OptimizerVariant(Technique):
    """A variant of the optimizer, named by the suffix of its name (``suffix``: ``-8bit``)."""

    suffix = ""
    default = None

    def __init__(self) -> None:
        self.option = Option(keyword=self.name, flag="", kind=str, help="")

    def check(self, value: object) -> Any:
        raise InvalidInputError(
            f"techniques={{{self.name!r}: {value!r}}}: {self.name} is asked for by the "
            f"optimizer's name; give optimizer='adamw{self.suffix}' (or another optimizer's "
            f"name ending in {self.suffix})."
        )

    def given_by(self, settings: Settings) -> Any:
        optimizer = settings.optimizer
        named = isinstance(optimizer, str) and optimizer.endswith(self.suffix)
        return optimizer if named else None
