"""Check an output path before a writer touches it.

Writers write exactly the file they are given: they never replace a folder, never create
folders, and leave no temporary or companion files beside the user's path.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeAlias

from memfit._errors import InvalidInputError

__all__ = ["PathLike", "output_path"]

PathLike: TypeAlias = "str | os.PathLike[str]"


def output_path(path: PathLike, what: str, suffix: str) -> Path:
    """``path`` as a :class:`Path`, after checking that the ``what`` can be written there.

    ``suffix`` (``.png``) only shapes the example path in the error message.
    """
    target = Path(path).expanduser()
    if target.is_dir():
        raise InvalidInputError(
            f"Cannot write the {what} to '{target}': it is a folder. "
            f"Give a file path, e.g. '{target / ('memory' + suffix)}'."
        )
    parent = target.parent
    if not parent.is_dir():
        raise InvalidInputError(
            f"Cannot write the {what} to '{target}': the folder '{parent}' does not exist. "
            "Create it first or give a path in an existing folder."
        )
    return target
