"""The argument parser, built by a factory so tests can call it."""

from __future__ import annotations

import argparse
from importlib.metadata import PackageNotFoundError, version

from memfit.cli._commands import COMMANDS
from memfit.cli._help import HelpFormatter, epilog

__all__ = ["make_parser"]

_DEBUG_HELP = "show the traceback of an error (before or after the command)"


def _version() -> str:
    """The installed memfit's version (the package's metadata: no package imports the root,
    where ``memfit.__version__`` says the same, ``tests/cli`` checks it)."""
    try:
        return version("memfit")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "(not installed)"


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memfit",
        description="Know, fit and watch GPU memory in PyTorch.",
        epilog=epilog("memfit"),
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"memfit {_version()}")
    parser.add_argument("--debug", action="store_true", help=_DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    for command in COMMANDS:
        command.add_parser(sub)
    for name, each in sub.choices.items():  # also after the command: memfit estimate ... --debug
        each.formatter_class = HelpFormatter
        each.epilog = epilog(name)
        each.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help=_DEBUG_HELP
        )
    return parser
