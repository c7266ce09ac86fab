"""How much host memory is free to pin, read from the kernel (and the container's limit).

Activation offload pins its host copies: page-locked memory cannot be swapped out, so pinning
past what is free takes it from every other process or gets this one killed. Linux says what is
free in ``/proc/meminfo`` (``MemAvailable``); a container's cgroup v2 limit
(``memory.max`` less ``memory.current``) can be smaller, and the smaller counts. Elsewhere the
free physical pages (``os.sysconf``); None where nothing says.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["free_host_memory", "pinned_size"]

_MEMINFO = Path("/proc/meminfo")
_CGROUP = Path("/sys/fs/cgroup")


def free_host_memory() -> int | None:
    """Bytes of host memory free to take now (the smallest of what the kernel and the
    container's limit leave), or None where the platform does not say."""
    found = [n for n in (_meminfo_available(), _cgroup_free()) if n is not None]
    if not found:
        found = [n for n in (_sysconf_free(),) if n is not None]
    return min(found) if found else None


def pinned_size(nbytes: int) -> int:
    """What PyTorch's pinned-memory allocator takes for ``nbytes``: the next power of two."""
    return 1 << max(0, nbytes - 1).bit_length()


def _meminfo_available() -> int | None:
    try:
        for line in _MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_free() -> int | None:
    try:
        limit = (_CGROUP / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(0, int(limit) - int((_CGROUP / "memory.current").read_text().strip()))
    except (OSError, ValueError):
        return None


def _sysconf_free() -> int | None:
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None
