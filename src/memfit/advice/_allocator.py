"""Allocator settings as advice: which ones to try on a recorded trace, how to set one, and
which to recommend once each has been replayed.

Each setting is tried on its own, from torch's defaults, so the recommendation is a complete
``PYTORCH_CUDA_ALLOC_CONF`` value. ``garbage_collection_threshold`` only acts when a memory
fraction is set (``torch.cuda.set_per_process_memory_fraction``), so it is tried with one,
against a capacity: the one given, or else the peak the run reserved. The replays themselves
are ``memfit.snapshot``'s; a :class:`WhatIf` is the saving one of them measured.
"""

from __future__ import annotations

from dataclasses import dataclass

from memfit._units import MiB, format_bytes
from memfit.advice._fix import How
from memfit.allocator import AllocatorConfig

__all__ = [
    "GC_FRACTION",
    "MIN_SAVING_BYTES",
    "MIN_SAVING_FRACTION",
    "AllocatorCandidate",
    "WhatIf",
    "alloc_conf_how",
    "alloc_conf_text",
    "allocator_candidates",
    "recommend_allocator",
    "streamable_configs",
]

MIN_SAVING_FRACTION = 0.02
MIN_SAVING_BYTES = 256 * MiB
GC_THRESHOLD = 0.8
GC_FRACTION = 0.999  # ~ all of the capacity; below 1 so that torch turns the limit on
_SPLIT_SIZES_MB = (128, 512)


def alloc_conf_text(config: AllocatorConfig) -> str:
    """The ``PYTORCH_CUDA_ALLOC_CONF`` text of ``config``; ``default`` for torch's defaults."""
    return config.to_string() or "default"


@dataclass(frozen=True, slots=True)
class AllocatorCandidate:
    """A setting to replay: its label, the config, and whether it needs a capacity."""

    label: str
    config: AllocatorConfig
    with_capacity: bool  # replayed against a capacity (and memory fraction)

    def note(self, capacity_given: bool) -> str | None:
        """What the replay assumed beyond the setting (the memory fraction garbage collection
        needs), for the row of the table; ``None`` when nothing."""
        if not self.with_capacity:
            return None
        source = "of the given capacity" if capacity_given else "= the recorded peak"
        return f"with set_per_process_memory_fraction({GC_FRACTION}) {source}"


@dataclass(frozen=True, slots=True)
class WhatIf:
    """The outcome of replaying the trace under one setting.

    ``peak_reserved`` and ``saved`` are ``None`` when the replay stopped (out of memory, or the
    setting cannot be emulated); ``outcome`` then says why. ``saved`` is measured against the
    emulated replay of the recorded settings, so emulation error cancels out.
    """

    label: str
    recorded: bool
    peak_reserved: int | None
    peak_allocated: int | None
    saved: int | None
    outcome: str | None
    note: str | None


def allocator_candidates(recorded: AllocatorConfig) -> list[AllocatorCandidate]:
    """The settings to try besides the recorded one (duplicates of it left out)."""
    gc = AllocatorConfig(
        garbage_collection_threshold=GC_THRESHOLD, per_process_memory_fraction=GC_FRACTION
    )
    out = [
        AllocatorCandidate("default", AllocatorConfig(), False),
        AllocatorCandidate(
            "expandable_segments:True", AllocatorConfig(expandable_segments=True), False
        ),
    ]
    out += [
        AllocatorCandidate(
            f"max_split_size_mb:{mb}", AllocatorConfig(max_split_size=mb * MiB), False
        )
        for mb in _SPLIT_SIZES_MB
    ]
    out.append(AllocatorCandidate(f"garbage_collection_threshold:{GC_THRESHOLD}", gc, True))
    return [c for c in out if c.config != recorded]


def streamable_configs() -> list[AllocatorConfig]:
    """The settings whose replay can start before the recorded settings are known: all but the
    defaults (usually the recorded ones) and garbage collection (which needs the peak)."""
    default = AllocatorConfig()
    return [c.config for c in allocator_candidates(default) if not c.with_capacity]


def recommend_allocator(rows: list[WhatIf], baseline: int) -> str:
    """One line: the best setting if it saves > 2% and > 256 MiB of peak reserved, else why not."""
    tried = [r for r in rows if not r.recorded and r.saved is not None]
    if not tried:
        return "No other setting could be replayed, so there is nothing to recommend."
    best = max(tried, key=lambda r: r.saved or 0)
    saved = best.saved or 0
    if saved > MIN_SAVING_FRACTION * baseline and saved > MIN_SAVING_BYTES:
        assert best.peak_reserved is not None
        extra = f" ({best.note})" if best.note else ""
        return (
            f"Set PYTORCH_CUDA_ALLOC_CONF={best.label}{extra}: peak reserved "
            f"{format_bytes(best.peak_reserved)} instead of {format_bytes(baseline)}, "
            f"{format_bytes(saved)} ({100 * saved / baseline:.1f}%) less."
        )
    if saved > 0:
        return (
            f"Keep the recorded settings: the best one tried ({best.label}) saves only "
            f"{format_bytes(saved)} of peak reserved, below the 2% and 256 MiB worth changing for."
        )
    return "Keep the recorded settings: no setting tried lowers the peak reserved memory."


def alloc_conf_how(setting: str, command: str) -> tuple[How, ...]:
    """How to run ``command`` with the allocator ``setting``: plain, under ``memfit run``, and
    the memory fraction garbage collection needs."""
    steps: tuple[How, ...] = (
        ("", f"PYTORCH_CUDA_ALLOC_CONF={setting} {command}"),
        ("with memfit run", f"PYTORCH_CUDA_ALLOC_CONF={setting} memfit run -- {command}"),
    )
    if setting.startswith("garbage_collection"):
        steps += (
            (
                "and in the program, before the first CUDA allocation (the collection acts "
                "only under a memory fraction)",
                "torch.cuda.set_per_process_memory_fraction(0.99)",
            ),
        )
    return steps
