"""Ctrl-C ends the ``memfit`` command within a second, whatever it is doing.

The first Ctrl-C raises :class:`KeyboardInterrupt` as Python's own handler does (not inside an
import, whose extension code may abort on it: there the watchdog below ends the command), and the
command unwinds: :func:`memfit.cli.main` prints "Interrupted." and returns 130, and the forked
workers are killed on the way out. Two things can keep a process running after that, and a
watchdog covers both: code that swallows the interrupt (a library's bare ``except:`` around an
import, say), and an exit that takes long (the interpreter's teardown of torch). Half a second
after the first Ctrl-C, or at a second one, the command kills its workers, says
"Interrupted." if nothing has, and exits with 130 at once.

After an interrupt the command also exits without the interpreter's teardown: besides its
time, CPython kills itself with SIGINT on the way out when the interrupt was first raised in
code run through its C API (an extension module's import, for one), even though memfit caught
it; the shell would then see a signal, not 130.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import suppress
from types import FrameType

from memfit._forked import kill_workers

__all__ = ["INTERRUPTED", "exit_interrupted", "install", "said_interrupted"]

INTERRUPTED = 130
WATCHDOG_SECONDS = 0.5
_state = {"interrupted": False, "said": False}


def install() -> None:
    """Handle Ctrl-C in this process as described above (the main thread only)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_sigint)


def said_interrupted() -> None:
    """Record that "Interrupted." has been printed, so the watchdog does not say it again."""
    _state["said"] = True


def exit_interrupted() -> None:
    """Kill the workers, say "Interrupted." unless said, flush, and exit with 130 now."""
    kill_workers()
    if not _state["said"]:
        _state["said"] = True
        _write(sys.stderr, "Interrupted.\n")
    for stream in (sys.stdout, sys.stderr):
        _flush(stream)
    os._exit(INTERRUPTED)


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    if _state["interrupted"]:  # a second Ctrl-C: stop now
        exit_interrupted()
    _state["interrupted"] = True
    watchdog = threading.Timer(WATCHDOG_SECONDS, exit_interrupted)
    watchdog.daemon = True
    watchdog.start()
    if _importing(frame):
        # an import's extension code may not survive an exception thrown through it (a
        # pybind11 callback aborts the process: "terminate called after throwing"); there is
        # nothing to unwind yet, and the watchdog ends the command
        return
    raise KeyboardInterrupt


def _importing(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside an import (Python's import machinery is on its stack)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _write(stream: object, text: str) -> None:
    with suppress(OSError, ValueError, AttributeError):  # closed, or not a stream
        stream.write(text)  # type: ignore[attr-defined]


def _flush(stream: object) -> None:
    with suppress(OSError, ValueError, AttributeError):
        stream.flush()  # type: ignore[attr-defined]
