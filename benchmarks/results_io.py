"""Reading results files as the scripts find them: plain JSON, or gzipped where a large raw file
(a plan file's every candidate, an op profile, an identity dump) is stored as ``NAME.json.gz``
to keep ``benchmarks/results`` small.

    from results_io import read_json, profile_paths
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any


def read_json(path: str | Path) -> Any:
    """The JSON in ``path``; a name ending in ``.gz`` is read through gzip."""
    path = Path(path)
    if path.name.endswith(".gz"):
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            return json.load(fh)
    return json.loads(path.read_text())


def profile_paths(directory: Path) -> list[Path]:
    """The per-model files of an ``op_profile.py`` directory (``*.json`` or ``*.json.gz``),
    sorted by name, without its ``meta.json``."""
    found = [*directory.glob("*.json"), *directory.glob("*.json.gz")]
    return sorted(p for p in found if p.name not in ("meta.json", "meta.json.gz"))


def is_profile_meta(path: str | Path) -> bool:
    """Whether ``path`` is a profile directory's ``meta.json`` (not a model's profile)."""
    return Path(path).name in ("meta.json", "meta.json.gz")
