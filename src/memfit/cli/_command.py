"""What a command of ``memfit`` is: its name, how it adds its parser, and how it runs."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

from rich.console import Console

__all__ = ["Command"]

SubParsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


@dataclass(frozen=True)
class Command:
    """One command: ``add_parser(sub)`` registers its flags on the top parser's subparsers,
    ``run(args, console)`` runs it and returns the exit code. Each lives in its own module,
    ``memfit/cli/_<name>_cmd.py``, as ``COMMAND``; ``memfit/cli/_commands.py`` lists them."""

    name: str
    add_parser: Callable[[SubParsers], None]
    run: Callable[[argparse.Namespace, Console], int]
