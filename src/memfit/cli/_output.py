"""Where a command's output goes when its reader goes away.

A reader that goes away early (``memfit doctor | head -1``) has what it wanted: the command
stops quietly with exit code 0. :class:`OutputConsole` lets rich's tables meet a closed pipe as
``print`` does, as a :class:`BrokenPipeError` that :func:`memfit.cli.main` handles, and
:func:`silence_stdout` keeps the interpreter's last flush from meeting it again.
"""

from __future__ import annotations

import os
import sys

from rich.console import Console

__all__ = ["OutputConsole", "silence_stdout"]


class OutputConsole(Console):
    """A rich console that lets a closed pipe be a :class:`BrokenPipeError` (the command line
    stops quietly), where rich's own ends the process with exit code 1."""

    def on_broken_pipe(self) -> None:
        self.quiet = True  # nothing more is written through this console
        raise BrokenPipeError("the reader of the output went away")


def silence_stdout() -> None:
    """Point standard output at /dev/null, so that the interpreter's last flush of what could
    not be written (to a closed pipe) fails no more."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a file (a test's capture)
        pass
