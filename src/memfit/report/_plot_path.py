"""Check a plot's path before the work that the plot draws (a trace or a search takes seconds).

One check for every ``--plot``: the suffix is one the plot can be written in, the folder
exists and can be written to, and matplotlib is installed when the suffix is ``.png``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from memfit._errors import InvalidInputError, MissingExtraError
from memfit.report._paths import PathLike, output_path

__all__ = ["check_plot_path"]


def check_plot_path(path: PathLike, suffixes: Sequence[str], what: str = "plot") -> Path:
    """``path`` as a :class:`Path` once a ``what`` in one of ``suffixes`` can be written there.

    Raises :class:`~memfit.InvalidInputError` for another suffix, a folder, a missing or
    read-only folder, and :class:`~memfit.MissingExtraError` for a ``.png`` without
    matplotlib (``memfit[plot]``).
    """
    suffix = Path(path).suffix.lower()
    target = output_path(path, what, suffix if suffix in suffixes else suffixes[0])
    if suffix not in suffixes:
        given = f"the suffix '{suffix}'" if suffix else "no suffix"
        accepted = ", ".join(suffixes[:-1]) + f" or {suffixes[-1]}" if len(suffixes) > 1 else ""
        raise InvalidInputError(
            f"Cannot tell which format to write the {what} '{path}' in: it has {given}. "
            f"Give a path ending in {accepted or suffixes[0]}, e.g. 'memory{suffixes[0]}'."
        )
    parent = target.parent
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InvalidInputError(
            f"Cannot write the {what} to '{target}': the folder '{parent}' is not writable. "
            "Give a path in a folder you can write to."
        )
    if suffix == ".png":
        try:
            import matplotlib  # noqa: F401
        except ImportError as err:
            raise MissingExtraError("matplotlib", "PNG plots", "plot") from err
    return target
