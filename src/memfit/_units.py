"""Byte sizes at the edges: parse what users type, format what they read.

Inside memfit every size is an ``int`` of bytes. Parsing accepts binary (``GiB``) and decimal
(``GB``) units; formatting always uses binary units and says so.
"""

from __future__ import annotations

import re

from memfit._errors import InvalidInputError

__all__ = ["GiB", "KiB", "MiB", "format_bytes", "parse_size"]

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
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int) -> int:
    """Parse ``24GiB``, ``24GB``, ``24000MiB`` or a bare byte count into bytes."""
    if isinstance(text, bool):
        raise InvalidInputError(f"Size {text!r} is not a size; give e.g. '24GiB' or '80GB'.")
    if isinstance(text, int):
        if text < 0:
            raise InvalidInputError(f"Size {text} is negative; give a byte count >= 0.")
        return text
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise InvalidInputError(
            f"Size {text!r} is not understood. Give a number with an optional unit: "
            "B, KiB, MiB, GiB, TiB (binary) or KB, MB, GB, TB (decimal), e.g. '24GiB' or '80GB'."
        )
    return int(float(match.group(1)) * _UNITS[unit])


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
