"""8-bit optimizer states (``adamw-8bit``): bitsandbytes' Adam8bit and AdamW8bit.

Its mechanics need torch: they load on first use (``memfit._lazy``); the technique's hooks
(``TECHNIQUE``) do not."""

from __future__ import annotations

import typing as _typing

from memfit._lazy import lazy_attributes as _lazy_attributes
from memfit.technique.eight_bit._technique import EIGHT_BIT, TECHNIQUE, EightBit

if _typing.TYPE_CHECKING:
    from memfit.technique.eight_bit._bnb import (
        eight_bit_available,
        eight_bit_class,
    )

_LAZY = {
    "eight_bit_available": "_bnb",
    "eight_bit_class": "_bnb",
}

__getattr__, __dir__ = _lazy_attributes(__name__, _LAZY, globals())

__all__ = [
    "EIGHT_BIT",
    "TECHNIQUE",
    "EightBit",
    "eight_bit_available",
    "eight_bit_class",
]
