"""The caching allocator's settings, and the ``PYTORCH_CUDA_ALLOC_CONF`` parser.

Follows ``AcceleratorAllocatorConfig::parseArgs`` (c10/core/AllocatorConfig.cpp) and
``CUDAAllocatorConfig::parseArgs`` (c10/cuda/CUDAAllocatorConfig.cpp) of torch 2.11-2.14: the
same tokens (``key:value`` pairs split on ``,``, lists in ``[...]``, whitespace ignored), the
same limits, ``large_segment_size_mb`` read first because the other minimums depend on it.
Keys torch accepts that do not change device memory (pinned-memory and locking options) are
accepted and ignored. Unlike torch, numbers must be plain non-negative integers.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from memfit._errors import InvalidInputError
from memfit.allocator._constants import K_LARGE_BUFFER, K_MIN_LARGE_ALLOC, MB, ROUNDUP_INTERVALS

__all__ = ["ENV_VARS", "AllocatorConfig"]

#: Environment variables torch reads the settings from, first found wins.
ENV_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_ALLOC_CONF")

_NO_ROUNDUP = (0,) * ROUNDUP_INTERVALS
_SEPARATORS = frozenset(",:[]")
# Keys torch accepts that only concern pinned host memory, locking or IPC: skipped.
_IGNORED_KEYS = frozenset(
    {
        "release_lock_on_cudamalloc",
        "release_lock_on_hipmalloc",
        "pinned_use_cuda_host_register",
        "pinned_use_hip_host_register",
        "pinned_num_register_threads",
        "pinned_reserve_segment_size_mb",
        "pinned_use_background_threads",
        "pinned_max_round_threshold_mb",
        "pinned_max_cached_size_mb",
        "pinned_free_catch_all",
        "graph_capture_record_stream_reuse",
        "throw_on_cudamalloc_oom",
    }
)
_MEMORY_KEYS = (
    "expandable_segments",
    "max_split_size_mb",
    "max_non_split_rounding_mb",
    "roundup_power2_divisions",
    "garbage_collection_threshold",
    "large_segment_size_mb",
    "per_process_memory_fraction",
    "backend",
)


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


@dataclass(frozen=True)
class AllocatorConfig:
    """What ``PYTORCH_CUDA_ALLOC_CONF`` sets that changes device memory. Sizes are bytes.

    ``max_split_size`` and ``max_non_split_rounding`` are ``None`` when unset (no limit, and
    ``large_segment_size`` respectively). ``roundup_power2_divisions`` has one entry per power
    of 2 from 1 MB to 32 GB; 0 or 1 means plain 512-byte rounding. ``garbage_collection_threshold``
    only acts when ``per_process_memory_fraction`` < 1, as in torch.
    """

    expandable_segments: bool = False
    max_split_size: int | None = None
    max_non_split_rounding: int | None = None
    roundup_power2_divisions: tuple[int, ...] = field(default=_NO_ROUNDUP)
    garbage_collection_threshold: float = 0.0
    large_segment_size: int = K_LARGE_BUFFER
    per_process_memory_fraction: float = 1.0

    def __post_init__(self) -> None:
        if len(self.roundup_power2_divisions) != ROUNDUP_INTERVALS:
            raise InvalidInputError(
                f"roundup_power2_divisions has {len(self.roundup_power2_divisions)} entries; it "
                f"needs {ROUNDUP_INTERVALS}, one per power of 2 from 1 MB to 32 GB. Use "
                "AllocatorConfig.parse('roundup_power2_divisions:4') to set one value for all."
            )
        for d in self.roundup_power2_divisions:
            if d != 0 and not _is_pow2(d):
                raise InvalidInputError(
                    f"roundup_power2_divisions value {d} is not accepted; each must be 0 "
                    "(off) or a power of 2 such as 1, 2, 4, 8."
                )
        if self.large_segment_size <= K_MIN_LARGE_ALLOC or self.large_segment_size % MB:
            raise InvalidInputError(
                f"large_segment_size {self.large_segment_size} bytes is not accepted; torch "
                "takes a whole number of MB above 10 (large_segment_size_mb > 10)."
            )
        for name in ("max_split_size", "max_non_split_rounding"):
            value = getattr(self, name)
            if value is not None and value < self.large_segment_size:
                raise InvalidInputError(
                    f"{name} {value} bytes is too small; torch requires at least "
                    f"large_segment_size ({self.large_segment_size // MB} MB), or leave it unset."
                )
        threshold = self.garbage_collection_threshold
        if threshold != 0.0 and not 0.0 < threshold < 1.0:
            raise InvalidInputError(
                f"garbage_collection_threshold {threshold} is not accepted; give a fraction "
                "strictly between 0.0 and 1.0, or 0.0 to turn garbage collection off."
            )
        if not 0.0 <= self.per_process_memory_fraction <= 1.0:
            raise InvalidInputError(
                f"per_process_memory_fraction {self.per_process_memory_fraction} is not "
                "accepted; give a fraction in [0.0, 1.0] (1.0 means no limit)."
            )

    @property
    def non_split_rounding(self) -> int:
        """How far an oversize cached block may exceed a request and still be used whole."""
        if self.max_non_split_rounding is None:
            return self.large_segment_size
        return self.max_non_split_rounding

    @classmethod
    def parse(cls, text: str) -> AllocatorConfig:
        """Parse a ``PYTORCH_CUDA_ALLOC_CONF`` string, e.g. ``expandable_segments:True``."""
        return _parse(text)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AllocatorConfig:
        """The settings torch would read from the environment (first of :data:`ENV_VARS`)."""
        env = os.environ if environ is None else environ
        for var in ENV_VARS:
            if var in env:
                return _parse(env[var])
        return cls()

    def to_string(self) -> str:
        """The ``PYTORCH_CUDA_ALLOC_CONF`` text for these settings (non-default keys only)."""
        parts = []
        if self.large_segment_size != K_LARGE_BUFFER:
            parts.append(f"large_segment_size_mb:{self.large_segment_size // MB}")
        if self.expandable_segments:
            parts.append("expandable_segments:True")
        if self.max_split_size is not None:
            parts.append(f"max_split_size_mb:{self.max_split_size // MB}")
        if self.max_non_split_rounding is not None:
            parts.append(f"max_non_split_rounding_mb:{self.max_non_split_rounding // MB}")
        table = self.roundup_power2_divisions
        if len(set(table)) == 1 and table[0] != 0:
            parts.append(f"roundup_power2_divisions:{table[0]}")
        elif table != _NO_ROUNDUP:
            pairs = ",".join(f"{1 << i}:{d}" for i, d in enumerate(table))
            parts.append(f"roundup_power2_divisions:[{pairs}]")
        if self.garbage_collection_threshold:
            parts.append(f"garbage_collection_threshold:{self.garbage_collection_threshold}")
        if self.per_process_memory_fraction != 1.0:
            parts.append(f"per_process_memory_fraction:{self.per_process_memory_fraction}")
        return ",".join(parts)


# ---------------------------------------------------------------------------------------------
# Parsing


class _Tokens:
    """``ConfigTokenizer``: split on ``, : [ ]`` (kept as tokens), drop whitespace."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.items: list[str] = []
        buf: list[str] = []
        for ch in text:
            if ch in _SEPARATORS:
                if buf:
                    self.items.append("".join(buf))
                    buf = []
                self.items.append(ch)
            elif not ch.isspace():
                buf.append(ch)
        if buf:
            self.items.append("".join(buf))

    def fail(self, what: str) -> InvalidInputError:
        return InvalidInputError(f"Allocator settings {self.text!r}: {what}")

    def at(self, i: int, what: str) -> str:
        if i >= len(self.items):
            raise self.fail(f"expected {what} at the end.")
        return self.items[i]

    def expect(self, i: int, token: str) -> None:
        got = self.at(i, repr(token))
        if got != token:
            raise self.fail(f"expected {token!r} but found {got!r}.")

    def integer(self, i: int, key: str) -> int:
        token = self.at(i, f"a value for {key}")
        if not token.isdigit():
            raise self.fail(f"{key} takes a whole non-negative number, got {token!r}.")
        return int(token)

    def number(self, i: int, key: str) -> float:
        token = self.at(i, f"a value for {key}")
        try:
            return float(token)
        except ValueError:
            raise self.fail(f"{key} takes a number such as 0.6, got {token!r}.") from None

    def boolean(self, i: int, key: str) -> bool:
        token = self.at(i, f"a value for {key}")
        if token not in ("True", "False"):
            raise self.fail(
                f"{key} takes True or False (capitalised, as torch requires), got {token!r}."
            )
        return token == "True"

    def skip_value(self, i: int) -> int:
        """``skipKey``: the index of the value after ``key :``, or of the ``]`` closing a list."""
        self.expect(i + 1, ":")
        i += 2
        if self.at(i, "a value") != "[":
            return i
        while i < len(self.items) and self.items[i] != "]":
            i += 1
        if i == len(self.items):
            raise self.fail("a '[' list is not closed with ']'.")
        return i


@dataclass
class _Fields:
    """The settings seen so far while parsing (mutable twin of :class:`AllocatorConfig`)."""

    expandable_segments: bool = False
    max_split_size: int | None = None
    max_non_split_rounding: int | None = None
    roundup_power2_divisions: tuple[int, ...] = _NO_ROUNDUP
    garbage_collection_threshold: float = 0.0
    large_segment_size: int = K_LARGE_BUFFER
    per_process_memory_fraction: float = 1.0


_Handler = Callable[[_Tokens, int, _Fields], int]


def _mb_at_least(tokens: _Tokens, i: int, key: str, minimum_mb: int) -> int:
    tokens.expect(i + 1, ":")
    value = tokens.integer(i + 2, key)
    if value < minimum_mb:
        raise tokens.fail(
            f"{key} {value} is too small; it must be >= {minimum_mb} "
            "(large_segment_size_mb, 20 by default)."
        )
    return value * MB


def _max_split(tokens: _Tokens, i: int, fields: _Fields) -> int:
    minimum = fields.large_segment_size // MB
    fields.max_split_size = _mb_at_least(tokens, i, "max_split_size_mb", minimum)
    return i + 2


def _non_split(tokens: _Tokens, i: int, fields: _Fields) -> int:
    minimum = fields.large_segment_size // MB
    key = "max_non_split_rounding_mb"
    fields.max_non_split_rounding = _mb_at_least(tokens, i, key, minimum)
    return i + 2


def _large_segment(tokens: _Tokens, i: int, fields: _Fields) -> int:
    tokens.expect(i + 1, ":")
    value = tokens.integer(i + 2, "large_segment_size_mb")
    if value <= K_MIN_LARGE_ALLOC // MB:
        raise tokens.fail(f"large_segment_size_mb {value} is too small; it must be > 10.")
    fields.large_segment_size = value * MB
    return i + 2


def _gc_threshold(tokens: _Tokens, i: int, fields: _Fields) -> int:
    tokens.expect(i + 1, ":")
    value = tokens.number(i + 2, "garbage_collection_threshold")
    if not 0.0 < value < 1.0:
        raise tokens.fail(
            f"garbage_collection_threshold {value} is not accepted; give a "
            "fraction strictly between 0.0 and 1.0."
        )
    fields.garbage_collection_threshold = value
    return i + 2


def _fraction(tokens: _Tokens, i: int, fields: _Fields) -> int:
    tokens.expect(i + 1, ":")
    value = tokens.number(i + 2, "per_process_memory_fraction")
    if not 0.0 <= value <= 1.0:
        raise tokens.fail(
            f"per_process_memory_fraction {value} is not accepted; give a fraction in [0.0, 1.0]."
        )
    fields.per_process_memory_fraction = value
    return i + 2


def _expandable(tokens: _Tokens, i: int, fields: _Fields) -> int:
    tokens.expect(i + 1, ":")
    fields.expandable_segments = tokens.boolean(i + 2, "expandable_segments")
    return i + 2


def _backend(tokens: _Tokens, i: int, fields: _Fields) -> int:
    tokens.expect(i + 1, ":")
    value = tokens.at(i + 2, "a value for backend")
    if value == "cudaMallocAsync":
        raise tokens.fail(
            "backend:cudaMallocAsync hands memory to CUDA's own pool allocator, "
            "which memfit does not emulate; only backend:native is supported."
        )
    if value != "native":
        raise tokens.fail(
            f"backend {value!r} is unknown; torch accepts native and cudaMallocAsync."
        )
    return i + 2


def _divisions_value(tokens: _Tokens, i: int, allow_zero: bool) -> int:
    value = tokens.integer(i, "roundup_power2_divisions")
    if not (_is_pow2(value) or (allow_zero and value == 0)):
        zero = " or 0 (off) inside a list" if allow_zero else ""
        raise tokens.fail(
            f"roundup_power2_divisions value {value} is not accepted; it must "
            f"be a power of 2{zero}."
        )
    return value


def _roundup(tokens: _Tokens, i: int, fields: _Fields) -> int:
    """Single value for every interval, or ``[MB:divisions,...,>:divisions]`` per interval."""
    tokens.expect(i + 1, ":")
    i += 2
    if tokens.at(i, "a value for roundup_power2_divisions") != "[":
        fields.roundup_power2_divisions = (_divisions_value(tokens, i, False),) * ROUNDUP_INTERVALS
        return i
    table = [0] * ROUNDUP_INTERVALS
    last_index, first = 0, True
    i += 1
    while tokens.at(i, "']'") != "]":
        boundary = tokens.items[i]
        tokens.expect(i + 1, ":")
        value = _divisions_value(tokens, i + 2, True)
        if boundary == ">":  # every interval above the last one named
            table[last_index + 1 :] = [value] * (ROUNDUP_INTERVALS - last_index - 1)
        else:
            mb = tokens.integer(i, "a roundup_power2_divisions interval")
            if not _is_pow2(mb):
                raise tokens.fail(
                    f"roundup_power2_divisions interval {mb} is not a power of 2 "
                    "(intervals are in MB: 1, 2, 4, ..., 32768, or '>')."
                )
            index = min(mb.bit_length() - 1, ROUNDUP_INTERVALS - 1)
            if first:  # the first value also covers every smaller interval
                table[:index] = [value] * index
                first = False
            table[index] = value
            last_index = index
        i += 3
        if tokens.at(i, "']'") != "]":
            tokens.expect(i, ",")
            i += 1
    fields.roundup_power2_divisions = tuple(table)
    return i


_HANDLERS: dict[str, _Handler] = {
    "max_split_size_mb": _max_split,
    "max_non_split_rounding_mb": _non_split,
    "garbage_collection_threshold": _gc_threshold,
    "roundup_power2_divisions": _roundup,
    "expandable_segments": _expandable,
    "per_process_memory_fraction": _fraction,
    "backend": _backend,
}


def _unknown(tokens: _Tokens, key: str) -> InvalidInputError:
    accepted = ", ".join((*_MEMORY_KEYS, *sorted(_IGNORED_KEYS)))
    return tokens.fail(f"unknown key {key!r}. Accepted keys are: {accepted}.")


def _parse(text: str) -> AllocatorConfig:
    tokens = _Tokens(text)
    items = tokens.items
    fields = _Fields()
    # large_segment_size_mb first: the minimum of max_split_size_mb depends on it.
    for i, key in enumerate(items):
        if key == "large_segment_size_mb" and (i == 0 or items[i - 1] == ","):
            _large_segment(tokens, i, fields)
    i = 0
    while i < len(items):
        key = items[i]
        if key == "large_segment_size_mb":
            i = i + 2
        elif key in _HANDLERS:
            i = _HANDLERS[key](tokens, i, fields)
        elif key in _IGNORED_KEYS:
            i = tokens.skip_value(i)
        elif key in _SEPARATORS:
            raise tokens.fail(f"expected a key but found {key!r}.")
        else:
            raise _unknown(tokens, key)
        if i + 1 < len(items):
            tokens.expect(i + 1, ",")
            i += 1
        i += 1
    return AllocatorConfig(
        expandable_segments=fields.expandable_segments,
        max_split_size=fields.max_split_size,
        max_non_split_rounding=fields.max_non_split_rounding,
        roundup_power2_divisions=fields.roundup_power2_divisions,
        garbage_collection_threshold=fields.garbage_collection_threshold,
        large_segment_size=fields.large_segment_size,
        per_process_memory_fraction=fields.per_process_memory_fraction,
    )
