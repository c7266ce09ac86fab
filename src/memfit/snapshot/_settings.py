"""The allocator settings a snapshot was recorded with, as an :class:`AllocatorConfig`.

torch >= 2.5 stores ``allocator_settings`` in the snapshot: the ``PYTORCH_CUDA_ALLOC_CONF``
text and the parsed values (which also reflect ``torch.cuda.memory._set_allocator_settings``).
The text is parsed first (it alone carries e.g. ``large_segment_size_mb``); the parsed values,
when present, win.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from memfit._errors import InvalidInputError
from memfit.allocator import AllocatorConfig

__all__ = ["recorded_config"]

_INTERVALS = 16


def _divisions(raw: Any) -> tuple[int, ...] | None:
    if not isinstance(raw, dict) or len(raw) != _INTERVALS:
        return None
    try:
        ordered = sorted(raw.items(), key=lambda kv: int(kv[0]))
    except (TypeError, ValueError):
        return None
    values = tuple(v for _, v in ordered)
    if not all(type(v) is int and (v == 0 or v & (v - 1) == 0) for v in values):
        return None
    return values


def recorded_config(settings: Any, path: Path) -> tuple[AllocatorConfig, str | None]:
    """The settings in ``settings`` (the snapshot's ``allocator_settings``), and a note.

    The note says what could not be taken as recorded (``None`` when everything was).
    """
    if not isinstance(settings, dict) or not settings:
        return AllocatorConfig(), (
            "the snapshot does not record the allocator settings (torch < 2.5); "
            "assumed torch's defaults"
        )
    text = settings.get("PYTORCH_CUDA_ALLOC_CONF") or ""
    note = None
    try:
        config = AllocatorConfig.parse(text) if isinstance(text, str) else AllocatorConfig()
    except InvalidInputError as exc:
        config = AllocatorConfig()
        note = f"the recorded allocator settings cannot be emulated ({exc}); assumed defaults"
    changes: dict[str, Any] = {}
    if isinstance(settings.get("expandable_segments"), bool):
        changes["expandable_segments"] = settings["expandable_segments"]
    split = settings.get("max_split_size")
    if type(split) is int:
        changes["max_split_size"] = split if 0 < split < 1 << 62 else None
    threshold = settings.get("garbage_collection_threshold")
    if isinstance(threshold, float) and 0.0 <= threshold < 1.0:
        changes["garbage_collection_threshold"] = threshold
    divisions = _divisions(settings.get("roundup_power2_divisions"))
    if divisions is not None:
        changes["roundup_power2_divisions"] = divisions
    try:
        config = dataclasses.replace(config, **changes)
    except InvalidInputError as exc:
        note = f"the recorded allocator settings in '{path.name}' are inconsistent ({exc})"
    if config.per_process_memory_fraction < 1.0 or config.garbage_collection_threshold:
        config = dataclasses.replace(config, per_process_memory_fraction=1.0)
        note = (
            "a memory fraction (per_process_memory_fraction, and with it "
            "garbage_collection_threshold) is not replayed: the snapshot does not record the "
            "GPU's memory"
        )
    return config, note
