"""The optimizer stepped in backward (``adamw-in-backward``): each parameter stepped and its
gradient freed as soon as backward has it.

Its mechanics need torch: they load on first use (``memfit._lazy``); the technique's hooks
(``TECHNIQUE``) do not."""

from __future__ import annotations

import typing as _typing

from memfit._lazy import lazy_attributes as _lazy_attributes
from memfit.technique.in_backward._technique import (
    IN_BACKWARD,
    TECHNIQUE,
    InBackward,
    in_backward,
)

if _typing.TYPE_CHECKING:
    from memfit.technique.in_backward._stepper import (
        Around,
        OptimizerInBackward,
    )

_LAZY = {
    "Around": "_stepper",
    "OptimizerInBackward": "_stepper",
}

__getattr__, __dir__ = _lazy_attributes(__name__, _LAZY, globals())

__all__ = [
    "IN_BACKWARD",
    "TECHNIQUE",
    "Around",
    "InBackward",
    "OptimizerInBackward",
    "in_backward",
]
