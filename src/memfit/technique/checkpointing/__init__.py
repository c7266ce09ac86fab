"""Activation checkpointing: the model's repeated blocks found, and all, a share of them or
their expensive ops wrapped so that their forward is recomputed in backward instead of kept
(``_blocks``), or the model's own switch; switched on in a user's live model and off again
(``_live``); its hooks are ``_technique``'s.

Its mechanics need torch: they load on first use (``memfit._lazy``)."""

from __future__ import annotations

import typing as _typing

from memfit._lazy import lazy_attributes as _lazy_attributes
from memfit.technique.checkpointing._technique import (
    TECHNIQUE,
    Checkpointing,
    checkpointing_words,
    wrapped,
)

if _typing.TYPE_CHECKING:
    from memfit.technique.checkpointing._blocks import (
        SAVED_OPS,
        blocks_for,
        call_forward,
        checkpoint_blocks,
        checkpointed_blocks,
        checkpointing_on,
        chosen_blocks,
        find_blocks,
        unwrap_blocks,
        unwrap_forward,
        wrap_forward,
    )
    from memfit.technique.checkpointing._live import own_switch

_LAZY = {
    "SAVED_OPS": "_blocks",
    "blocks_for": "_blocks",
    "call_forward": "_blocks",
    "checkpoint_blocks": "_blocks",
    "checkpointed_blocks": "_blocks",
    "checkpointing_on": "_blocks",
    "chosen_blocks": "_blocks",
    "find_blocks": "_blocks",
    "unwrap_blocks": "_blocks",
    "unwrap_forward": "_blocks",
    "wrap_forward": "_blocks",
    "own_switch": "_live",
}

__getattr__, __dir__ = _lazy_attributes(__name__, _LAZY, globals())

__all__ = [
    "SAVED_OPS",
    "TECHNIQUE",
    "Checkpointing",
    "blocks_for",
    "call_forward",
    "checkpoint_blocks",
    "checkpointed_blocks",
    "checkpointing_on",
    "checkpointing_words",
    "chosen_blocks",
    "find_blocks",
    "own_switch",
    "unwrap_blocks",
    "unwrap_forward",
    "wrap_forward",
    "wrapped",
]
