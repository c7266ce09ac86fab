"""Where memfit keeps what it measured on this machine: one folder per kind, under
``$XDG_DATA_HOME/memfit`` (``~/.local/share/memfit``), or where an environment variable of
the kind's own says. The planner's calibrations and the convolution workspaces probed on this
GPU live there."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["data_dir"]


def data_dir(kind: str, variable: str) -> Path:
    """``$variable`` if set, else ``$XDG_DATA_HOME/memfit/kind``, else
    ``~/.local/share/memfit/kind``."""
    chosen = os.environ.get(variable)
    if chosen:
        return Path(chosen).expanduser()
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "memfit" / kind
