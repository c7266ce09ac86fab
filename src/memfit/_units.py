"""Byte sizes at the edges: parse what users type, format what they read.

Inside memfit every size is an ``int`` of bytes. Parsing accepts binary (``GiB``) and decimal
(``GB``) units, and numbers as Python writes them (``1.5GiB``, ``1e3MiB``); a negative size,
or one above :data:`MAX_SIZE` (no memory is that large: a typo or a unit mistake), is refused.
Formatting always uses binary units and says so.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import NamedTuple

from memfit._errors import InvalidInputError

__all__ = [
    "MAX_SIZE",
    "GiB",
    "KiB",
    "MiB",
    "SizeText",
    "format_bytes",
    "parse_size",
    "split_size",
    "unit_bytes",
]

KiB = 1024
MiB = 1024**2
GiB = 1024**3

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": KiB,
    "mib": MiB,
    "gib": GiB,
    "tib": 1024**4,
}
# a number (signed, with a fraction or an exponent, as Python writes it) and the letters after it
_SIZE = re.compile(
    r"^\s*([+-]?)\s*((?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$"
)
# No memory memfit meets is larger: a GPU has at most a few hundred GiB (memfit._gpus refuses
# more than 2 TiB), a host a few TiB. A size beyond it is a typo or a unit mistake.
MAX_SIZE = 1024**5  # 1 PiB
_UNIT_NAMES = "B, KiB, MiB, GiB, TiB (binary) or KB, MB, GB, TB (decimal)"


class SizeText(NamedTuple):
    """What a text that looks like a size says: its sign, its number and its unit as typed
    (``""``: none)."""

    negative: bool
    number: Decimal
    unit: str


def split_size(text: str) -> SizeText | None:
    """``text`` as a number followed by letters (``-5GiB``, ``1e30GiB``, ``24gigs``), whether
    or not the letters are a unit; ``None`` for anything else (a name such as ``h100``)."""
    match = _SIZE.match(text)
    if match is None:
        return None
    return SizeText(match.group(1) == "-", Decimal(match.group(2)), match.group(3))


def unit_bytes(unit: str) -> int | None:
    """The bytes of one ``unit`` (``GiB``, ``gb``, ``""`` for bytes); ``None`` if it is none."""
    return _UNITS.get(unit.lower())


def parse_size(text: str | int) -> int:
    """Parse ``24GiB``, ``24GB``, ``24000MiB``, ``1.5e3MiB`` or a bare byte count into bytes.

    Refuses (:class:`~memfit.InvalidInputError`, naming the value) what is not a number with
    one of the units, a negative size, and one above :data:`MAX_SIZE` (1 PiB)."""
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise InvalidInputError(f"Size {text!r} is not a size; give e.g. '24GiB' or '80GB'.")
    if isinstance(text, int):
        if text < 0:
            raise InvalidInputError(f"Size {text} is negative; give a byte count >= 0.")
        return _checked(text, text)
    parts = split_size(text)
    per_unit = None if parts is None else unit_bytes(parts.unit)
    if parts is None or per_unit is None:
        raise InvalidInputError(
            f"Size {text!r} is not understood. Give a number with an optional unit: "
            f"{_UNIT_NAMES}, e.g. '24GiB' or '80GB'."
        )
    if parts.negative and parts.number:
        raise InvalidInputError(
            f"Size {text!r} is negative; give a size of 0 or more, e.g. "
            f"'{text.strip().lstrip('-').strip()}'."
        )
    return _checked(text, parts.number, per_unit)


def _checked(text: str | int, number: int | Decimal, per_unit: int = 1) -> int:
    """``number`` units of ``per_unit`` bytes as an int, unless past :data:`MAX_SIZE`
    (compared first: ``1e999999999GiB`` is more than any int or Decimal should be made of)."""
    if number > MAX_SIZE or number * per_unit > MAX_SIZE:
        raise InvalidInputError(
            f"Size {text!r} is more than 1 PiB, larger than the memory of any GPU or host: "
            "check the number and the unit, e.g. '24GiB' or '80GB'."
        )
    return int(number * per_unit)


def format_bytes(n: int, *, precision: int = 2) -> str:
    """Format bytes with a binary unit: ``17.48 GiB``."""
    sign = "-" if n < 0 else ""
    value = float(abs(n))
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            if unit == "B":
                return f"{sign}{int(value)} B"
            return f"{sign}{value:.{precision}f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
