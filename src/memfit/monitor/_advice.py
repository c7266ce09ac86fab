"""One piece of ``memfit doctor``'s advice: what to change, with the reason."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Advice", "Severity"]

Severity = Literal["error", "warning", "info"]


@dataclass(frozen=True)
class Advice:
    """What to change, with the reason."""

    severity: Severity
    setting: str
    change: str
    reason: str
