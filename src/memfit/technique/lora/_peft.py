"""PEFT as LoRA uses it: the library (or its install command), and a configuration of the
user's held by identity."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memfit._errors import MissingExtraError

__all__ = ["GivenConfig", "require_peft"]


@dataclass(frozen=True, eq=False)
class GivenConfig:
    """The user's own PEFT configuration, held by identity: a workload and a plan's candidates
    keep it (PEFT's configurations cannot be hashed)."""

    config: Any


def require_peft() -> Any:
    """PEFT, or the install hint."""
    try:
        import peft
    except ImportError as err:
        raise MissingExtraError("peft", "LoRA (techniques={'lora': ...}, --lora)", "lora") from err
    return peft
