"""Attributes of library modules and classes swapped while a trace runs, and put back after."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["patched"]


@contextmanager
def patched(pairs: list[tuple[Any, str, Any]]) -> Iterator[None]:
    """Each ``(owner, name, value)`` set while this lasts; the old values restored after."""
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in pairs]
    for owner, name, value in pairs:
        setattr(owner, name, value)
    try:
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)
