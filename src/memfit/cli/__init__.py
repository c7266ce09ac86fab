"""The ``memfit`` command line: parse, call the library, render, map errors to exit codes.

Exit codes: 0 success, 1 memfit error (bad input, trace failure), 2 no GPU where one is needed,
130 interrupted. Errors print as one paragraph; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import sys
import traceback

from rich.console import Console

from memfit._errors import MemfitError, NoGPUError
from memfit.cli._parser import make_parser

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = make_parser()
    args = parser.parse_args(argv)
    console = Console()
    err = Console(stderr=True)
    if args.command is None:
        parser.print_help()
        return 1
    try:
        if args.command == "estimate":
            from memfit.cli._estimate_cmd import run_estimate

            return run_estimate(args, console)
        if args.command == "validate":
            from memfit.cli._validate_cmd import run_validate

            return run_validate(args, console)
        if args.command == "snapshot":
            from memfit.cli._snapshot_cmd import run_snapshot

            return run_snapshot(args, console)
        if args.command == "run":
            from memfit.cli._run_cmd import run_run

            return run_run(args, console)
        if args.command == "watch":
            from memfit.cli._watch_cmd import run_watch

            return run_watch(args, console)
        if args.command == "export":
            from memfit.cli._export_cmd import run_export

            return run_export(args, console)
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
