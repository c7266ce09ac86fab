"""``memfit.stats()``: each framework's own memory numbers, in one schema.

torch (``torch.cuda.memory_stats``), JAX (``Device.memory_stats()``) and TensorFlow
(``tf.config.experimental.get_memory_info``) each count differently; here they are one row per
framework and device: what is in use, its peak, the pool the framework holds, and its limit.
Only frameworks the program has imported and started are read: asking never starts a runtime
(that would make their settings too late). The same rows are what ``memfit.publish()`` writes
for ``memfit watch`` and ``memfit export``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from memfit.monitor import _framework_numbers
from memfit.monitor._configure import resolve_frameworks

__all__ = ["MemoryStats", "memory_stats_from_dict", "stats"]


@dataclass(frozen=True, slots=True)
class MemoryStats:
    """One framework's memory on one device, in bytes; ``None`` where it does not say.

    ``in_use``: memory its tensors/buffers hold (torch ``memory_allocated``, JAX
    ``bytes_in_use``, TensorFlow ``current``); ``peak``: the most of that so far; ``pool``:
    what its allocator holds from the device, used or cached (torch ``memory_reserved``, JAX
    ``pool_bytes``; TensorFlow does not say); ``limit``: the most it may take (torch's memory
    fraction, JAX ``bytes_limit``, TensorFlow's logical device limit). ``index``/``uuid``
    identify a GPU as NVML does, from ``CUDA_VISIBLE_DEVICES``.
    """

    framework: str
    device: str  # "gpu:0", "cpu:0": the framework's own numbering of visible devices
    kind: str
    index: int | None
    uuid: str | None
    in_use: int | None
    peak: int | None
    pool: int | None
    limit: int | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def memory_stats_from_dict(doc: dict[str, Any]) -> MemoryStats | None:
    """A row as :func:`stats` or a publisher wrote it; ``None`` if it is not one."""
    try:
        return MemoryStats(
            framework=str(doc["framework"]),
            device=str(doc["device"]),
            kind=str(doc["kind"]),
            index=_opt_int(doc.get("index")),
            uuid=None if doc.get("uuid") is None else str(doc["uuid"]),
            in_use=_opt_int(doc.get("in_use")),
            peak=_opt_int(doc.get("peak")),
            pool=_opt_int(doc.get("pool")),
            limit=_opt_int(doc.get("limit")),
        )
    except (KeyError, TypeError, ValueError):
        return None


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def stats(framework: str | Iterable[str] = "auto") -> list[MemoryStats]:
    """The memory numbers of ``framework`` (``"auto"``: every framework the program has
    imported), one row per device; empty for a framework whose runtime has not started."""
    rows = []
    for name in resolve_frameworks(framework):
        for doc in _framework_numbers.read_stats(name):
            row = memory_stats_from_dict(doc)
            if row is not None:
                rows.append(row)
    return rows
