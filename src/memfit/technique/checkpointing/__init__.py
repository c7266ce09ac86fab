"""Activation checkpointing: the model's repeated blocks found, and all, a share of them or
their expensive ops wrapped so that their forward is recomputed in backward instead of kept.

Its names need torch: they load on first use (``memfit._lazy``)."""

from __future__ import annotations

import typing as _typing

from memfit._lazy import lazy_attributes as _lazy_attributes

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
}

__getattr__, __dir__ = _lazy_attributes(__name__, _LAZY, globals())

__all__ = [
    "SAVED_OPS",
    "blocks_for",
    "call_forward",
    "checkpoint_blocks",
    "checkpointed_blocks",
    "checkpointing_on",
    "chosen_blocks",
    "find_blocks",
    "unwrap_blocks",
    "unwrap_forward",
    "wrap_forward",
]
