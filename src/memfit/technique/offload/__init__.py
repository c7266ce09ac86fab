"""Activation offload: what a share of the model's blocks save for the backward waits in pinned
host memory, copied on a side stream (see ``_offload``); its hooks are ``_technique``'s.

Its mechanics need torch: they load on first use (``memfit._lazy``)."""

from __future__ import annotations

import typing as _typing

from memfit._lazy import lazy_attributes as _lazy_attributes
from memfit.technique.offload._technique import (
    CHECKPOINTS_WORDS,
    TECHNIQUE,
    Offload,
    offload_words,
)

if _typing.TYPE_CHECKING:
    from memfit.technique.offload._offload import (
        MIN_OFFLOAD_BYTES,
        ActivationOffload,
        OffloadObserver,
        check_offload,
        offload_blocks,
        offloader_of,
    )

_LAZY = {
    "ActivationOffload": "_offload",
    "MIN_OFFLOAD_BYTES": "_offload",
    "OffloadObserver": "_offload",
    "check_offload": "_offload",
    "offload_blocks": "_offload",
    "offloader_of": "_offload",
}

__getattr__, __dir__ = _lazy_attributes(__name__, _LAZY, globals())

__all__ = [
    "CHECKPOINTS_WORDS",
    "MIN_OFFLOAD_BYTES",
    "TECHNIQUE",
    "ActivationOffload",
    "Offload",
    "OffloadObserver",
    "check_offload",
    "offload_blocks",
    "offload_words",
    "offloader_of",
]
