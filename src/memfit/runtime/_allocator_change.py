"""The allocator's settings as a reversible change of ``memfit.apply`` (see ``_changes``).

PyTorch takes ``PYTORCH_CUDA_ALLOC_CONF`` text at run time; each call changes only the keys it
names, and a getter returns the last text set, so what a key was before is read from that text
and the environment. Not every key can be set back to its default at run time.
"""

from __future__ import annotations

import os
import re
import warnings

import torch

from memfit._errors import InvalidInputError
from memfit.allocator import ENV_VARS, AllocatorConfig
from memfit.runtime._changes import Change

__all__ = ["AllocatorChange"]


def _keys(text: str) -> dict[str, str]:
    """``key:value`` pairs of an allocator setting text (commas inside ``[...]`` kept)."""
    pairs: dict[str, str] = {}
    for part in re.split(r",(?![^\[]*\])", text.strip()):
        key, sep, value = part.partition(":")
        if sep and key.strip():
            pairs[key.strip()] = value.strip()
    return pairs


# what a key is set back to when it was not set before (those torch accepts at run time)
_DEFAULTS = {"expandable_segments": "False"}


def _settings_now() -> str:
    getter = getattr(torch._C, "_accelerator_getAllocatorSettings", None)
    return str(getter()) if callable(getter) else ""


def _set_settings(text: str) -> None:
    setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None)
    if callable(setter):
        setter(text)
    else:  # older torch
        torch.cuda.memory._set_allocator_settings(text)


class AllocatorChange(Change):
    """The caching allocator's settings (``PYTORCH_CUDA_ALLOC_CONF`` text), set at run time;
    they act on the memory reserved from then on, so the cache's free blocks are released
    first. ``undo`` sets back each key to what it was, or to torch's default where torch
    accepts that at run time; a warning names those it cannot."""

    def __init__(self, text: str) -> None:
        AllocatorConfig.parse(text)  # refuses a text torch would not take, now
        self.settings = text
        self.text = f"allocator settings {text}"
        self._before: dict[str, str] = {}

    def do(self) -> None:
        before = next((_keys(os.environ[v]) for v in ENV_VARS if v in os.environ), {})
        self._before = {**before, **_keys(_settings_now())}
        torch.cuda.empty_cache()
        try:
            _set_settings(self.settings)
        except (RuntimeError, ValueError) as exc:
            raise InvalidInputError(
                f"PyTorch refused the plan's allocator settings {self.settings!r}: {exc}. Plan "
                "again without allocator settings, or set PYTORCH_CUDA_ALLOC_CONF yourself."
            ) from None

    def undo(self) -> None:
        restore: list[str] = []
        stuck: list[str] = []
        for key, value in _keys(self.settings).items():
            old = self._before.get(key, _DEFAULTS.get(key))
            if old is None:
                stuck.append(f"{key}:{value}")
            elif old != value:
                restore.append(f"{key}:{old}")
        if restore:
            _set_settings(",".join(restore))
        if stuck:
            warnings.warn(
                f"memfit.unapply cannot set the allocator's {', '.join(stuck)} back to PyTorch's "
                "default at run time; it stays in effect until the process ends.",
                RuntimeWarning,
                stacklevel=3,
            )
