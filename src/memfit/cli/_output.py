"""Where a command's output goes, and what happens when it cannot go there.

Two ends are not bugs of memfit's: a reader that goes away early (``memfit doctor | head -1``:
it has what it wanted, the command stops quietly with exit code 0), and a destination that
refuses the bytes (``memfit estimate ... > /dev/full``: a full disk, an I/O error), which is one
paragraph that says so, exit code 1. :func:`guarded_stdout` and :class:`OutputConsole` turn
both into one exception each, wherever the write happens: ``print``, a rich table, the flush
at the end.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from rich.console import Console

from memfit._errors import MemfitError

__all__ = ["OutputConsole", "OutputError", "guarded_stdout", "silence_stdout"]


class OutputError(MemfitError):
    """The output could not be written where it was sent (``> /dev/full``)."""


class OutputConsole(Console):
    """A rich console that lets a closed pipe be a :class:`BrokenPipeError` (the command line
    stops quietly), where rich's own ends the process with exit code 1."""

    def on_broken_pipe(self) -> None:
        self.quiet = True  # nothing more is written through this console
        raise BrokenPipeError("the reader of the output went away")


class _GuardedStream:
    """``sys.stdout`` while a command runs: what it fails to write (other than to a closed
    pipe) is an :class:`OutputError` naming the reason and the destination."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        with _reported(self._stream):
            return self._stream.write(text)

    def writelines(self, lines: Iterable[str]) -> None:
        with _reported(self._stream):
            self._stream.writelines(lines)

    def flush(self) -> None:
        with _reported(self._stream):
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding...: the stream's
        return getattr(self._stream, name)


@contextmanager
def _reported(stream: TextIO) -> Iterator[None]:
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as exc:
        where = _destination(stream)
        raise OutputError(
            f"could not write the output{f' to {where}' if where else ''}: "
            f"{exc.strerror or exc}. Send it where it can be written (another file, a disk "
            "with free space) and run the command again."
        ) from exc


def _destination(stream: TextIO) -> str | None:
    """The file ``stream`` writes to, where the system says (Linux's /proc)."""
    try:
        target = os.readlink(f"/proc/self/fd/{stream.fileno()}")
    except (OSError, ValueError, AttributeError):  # no /proc, or not a file (a test's capture)
        return None
    return target if target.startswith("/") else None  # not 'pipe:[123]'


@contextmanager
def guarded_stdout() -> Iterator[None]:
    """``sys.stdout`` guarded while the block runs (see :class:`_GuardedStream`)."""
    stream = sys.stdout
    sys.stdout = _GuardedStream(stream)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout = stream


def silence_stdout() -> None:
    """Point standard output at /dev/null, so that the interpreter's last flush of what could
    not be written (to a closed pipe, a full disk) fails no more."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a file (a test's capture)
        pass
