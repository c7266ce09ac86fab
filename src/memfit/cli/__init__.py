"""The ``memfit`` command line: parse, call the library, render, map errors to exit codes.

Exit codes: 0 success (also when the reader of the output goes away early, as in
``memfit estimate ... --json | head -1``: the output was cut on purpose, so memfit stops
quietly), 1 an error (a memfit error such as bad input, a failed trace or output that could
not be written, as to a full disk; or an unexpected one), 2 no GPU where one is needed or
flags the parser refuses, 130 interrupted (Ctrl-C).
``memfit plan`` exits 1 when nothing fits the budget, so its errors exit 2.
Errors print as one paragraph; ``--debug``, before or after the command, shows the
traceback.
"""

from __future__ import annotations

import argparse
import gc
import shlex
import sys
import traceback
from typing import NoReturn

from rich.console import Console

import memfit._interrupt as _interrupt
from memfit._errors import MemfitError, NoGPUError
from memfit.cli._argv import join_negative_values
from memfit.cli._commands import command_named
from memfit.cli._output import OutputConsole, OutputError, guarded_stdout, silence_stdout
from memfit.cli._parser import make_parser

__all__ = ["entry", "main"]

# the exit code of an error, for the commands whose 1 means something else
_ERROR_CODES = {"plan": 2}  # memfit plan: 1 is "nothing fits the budget"


def entry() -> NoReturn:
    """The ``memfit`` command: :func:`main` with Ctrl-C handled (:mod:`memfit._interrupt`),
    then an exit without the garbage collector's last passes over torch's and the model
    libraries' objects (0.7 s of the interpreter's teardown)."""
    _interrupt.install()  # Ctrl-C: out within a second, whatever the command is doing
    code = main()
    if code == _interrupt.INTERRUPTED:
        _interrupt.exit_interrupted()
    gc.freeze()  # what is alive now is torn down by reference counts alone
    sys.exit(code)


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); return the exit code."""
    words = list(sys.argv[1:] if argv is None else argv)
    parser = make_parser()
    # --gpu -5GiB reaches the check of the value, as --gpu=-5GiB does
    args = parser.parse_args(join_negative_values(parser, words))
    console = OutputConsole()  # a table meets a closed pipe as print does
    err = Console(stderr=True)
    if args.command is None:
        parser.print_help()
        return 1
    try:
        with guarded_stdout():  # a full disk: one paragraph (OutputError), not a bug's
            return _run(args, console)
    except BrokenPipeError:  # memfit ... --json | head -1: the reader has what it wanted
        silence_stdout()
        return 0
    except OutputError as exc:  # memfit ... > /dev/full: said once, never again at exit
        silence_stdout()
        _report(err, exc, args.debug, words)
        return _ERROR_CODES.get(args.command, 1)
    except NoGPUError as exc:
        _report(err, exc, args.debug, words)
        return 2
    except MemfitError as exc:
        _report(err, exc, args.debug, words)
        return _ERROR_CODES.get(args.command, 1)
    except KeyboardInterrupt:
        err.print("Interrupted.")
        _interrupt.said_interrupted()
        return _interrupt.INTERRUPTED
    except Exception as exc:  # a bug of memfit's or a library's: one paragraph, not a traceback
        _report(err, exc, args.debug, words, unexpected=True)
        return _ERROR_CODES.get(args.command, 1)


def _run(args: argparse.Namespace, console: Console) -> int:
    """Run the command (``memfit.cli._commands`` lists them) and flush its output, where a
    closed pipe or a full disk shows, rather than at the interpreter's exit."""
    code = int(command_named(args.command).run(args, console))
    sys.stdout.flush()
    return code


def _report(
    console: Console,
    exc: BaseException,
    debug: bool,
    words: list[str],
    *,
    unexpected: bool = False,
) -> None:
    if debug:
        console.print(traceback.format_exc(), markup=False, highlight=False)
    # soft_wrap: the terminal wraps the paragraph, so paths and commands stay copyable.
    console.print("[bold red]error:[/] ", end="", highlight=False)
    if unexpected:
        text = (
            f"memfit hit an unexpected error: {type(exc).__name__}: {exc}. This is a bug in "
            "memfit or a library it calls; run again with --debug and report the traceback."
        )
    else:
        text = str(exc)
    console.print(text, markup=False, highlight=False, soft_wrap=True)
    if not debug:
        again = shlex.join(["memfit", "--debug", *words])
        console.print(
            f"(for the traceback, run again with --debug: {again})",
            style="dim",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


if __name__ == "__main__":
    sys.exit(main())
