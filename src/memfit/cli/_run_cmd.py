"""``memfit run [--oom-dir DIR] [--no-history] -- COMMAND ...``: run with the OOM report."""

from __future__ import annotations

import argparse
import json
import signal

from rich.console import Console

from memfit._errors import InvalidInputError

__all__ = ["add_run_parser", "run_run"]

_DEFAULT_DIR = "memfit-oom"
_DEFAULT_ENTRIES = 100_000


def add_run_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``run`` on the subcommand parsers."""
    p = sub.add_parser(
        "run",
        help="run a command; explain its CUDA out-of-memory errors",
        description="Run COMMAND unchanged with memfit's out-of-memory report installed in "
        "every Python process it starts. On torch.OutOfMemoryError the allocator snapshot and "
        "a report (what failed, where, memory at the failure, fixes ranked by the bytes they "
        "save) are written to --oom-dir. The exit code is the command's.",
        usage="memfit run [--oom-dir DIR] [--no-history] [--max-entries N] [--json]\n"
        "                  -- COMMAND [ARG ...]",
    )
    p.add_argument(
        "--oom-dir",
        default=_DEFAULT_DIR,
        metavar="DIR",
        help=f"where to write snapshots and reports (default: ./{_DEFAULT_DIR}, created)",
    )
    p.add_argument(
        "--no-history",
        action="store_true",
        help="do not record the allocator's trace (faster; the report then has no peaks, "
        "allocation sites or allocator replays)",
    )
    p.add_argument(
        "--max-entries",
        type=int,
        default=_DEFAULT_ENTRIES,
        metavar="N",
        help=f"allocator events kept in the trace (default: {_DEFAULT_ENTRIES:,})",
    )
    p.add_argument(
        "--json", action="store_true", help="print the outcome as JSON on stdout at the end"
    )
    p.add_argument("cmd", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def _exit_code(returncode: int) -> int:
    """The child's exit code; killed by signal N: 128 + N, as shells report it."""
    return 128 - returncode if returncode < 0 else returncode


def run_run(args: argparse.Namespace, console: Console) -> int:
    from memfit.oom import run_with_report
    from memfit.report import oom_markdown

    command = list(args.cmd)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise InvalidInputError(
            "memfit run needs a command after '--', e.g. memfit run -- python train.py."
        )
    result = run_with_report(
        command,
        args.oom_dir,
        render=oom_markdown,
        record_history=not args.no_history,
        max_entries=args.max_entries,
    )
    code = _exit_code(result.returncode)
    if args.json:
        print(
            json.dumps(
                {
                    "exit_code": code,
                    "oom_dir": str(result.directory),
                    "reports": [
                        {
                            "report": str(r.report),
                            "json": str(r.json),
                            "snapshot": None if r.snapshot is None else str(r.snapshot),
                        }
                        for r in result.reports
                    ],
                    "problems": list(result.problems),
                },
                indent=2,
            )
        )
        return code
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    for problem in result.problems:
        err.print(f"memfit: {problem}", markup=False)
    for r in result.reports:
        err.print(f"memfit: CUDA out of memory; report: {r.report}", markup=False)
        if r.snapshot is not None:
            err.print(f"        snapshot: {r.snapshot} (memfit snapshot FILE)", markup=False)
    if result.returncode < 0:
        try:
            name = signal.Signals(-result.returncode).name
        except ValueError:
            name = f"signal {-result.returncode}"
        err.print(f"memfit: the command was killed by {name}", markup=False)
    return code
