"""The ``memfit`` command line: parse, call the library, render, map errors to exit codes.

Exit codes: 0 success, 1 memfit error (bad input, trace failure), 2 no GPU where one is needed,
130 interrupted. Errors print as one paragraph; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import importlib
import sys
import traceback

from rich.console import Console

from memfit._errors import MemfitError, NoGPUError
from memfit.cli._parser import make_parser

__all__ = ["main"]

# each command lives in memfit.cli._<name>_cmd as run_<name>(args, console), imported when used
_COMMANDS = ("estimate", "validate", "snapshot", "run", "watch", "export")


def main(argv: list[str] | None = None) -> int:
    parser = make_parser()
    args = parser.parse_args(argv)
    console = Console()
    err = Console(stderr=True)
    if args.command is None:
        parser.print_help()
        return 1
    try:
        if args.command in _COMMANDS:
            run = getattr(
                importlib.import_module(f"memfit.cli._{args.command}_cmd"), f"run_{args.command}"
            )
            return int(run(args, console))
    except NoGPUError as exc:
        _report(err, exc, args.debug)
        return 2
    except MemfitError as exc:
        _report(err, exc, args.debug)
        return 1
    except KeyboardInterrupt:
        err.print("Interrupted.")
        return 130
    parser.print_help()
    return 1


def _report(console: Console, exc: BaseException, debug: bool) -> None:
    if debug:
        console.print(traceback.format_exc(), markup=False, highlight=False)
    # soft_wrap: the terminal wraps the paragraph, so paths and commands stay copyable.
    console.print("[bold red]error:[/] ", end="", highlight=False)
    console.print(str(exc), markup=False, highlight=False, soft_wrap=True)
    if not debug:
        console.print("[dim](run with --debug for the traceback)[/]")


if __name__ == "__main__":
    sys.exit(main())
