"""The ``memfit`` command's first lines: Ctrl-C handled before anything heavy is imported.

An interrupt that arrives while the command line's libraries load (rich, then torch and the
model libraries) can be swallowed by an import that catches every exception, and the command
would run on to its end. The handler (:mod:`memfit._interrupt`) is installed first, from
modules that import nothing heavy, and then the command line is imported and run.
"""

from __future__ import annotations

from typing import NoReturn

import memfit._interrupt as _interrupt

__all__ = ["run"]


def run() -> NoReturn:
    """The ``memfit`` command (the console script and ``python -m memfit``)."""
    _interrupt.install()
    from memfit.cli import entry

    entry()
