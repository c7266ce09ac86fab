"""``memfit run [--oom-dir DIR] [--no-history] -- COMMAND ...``: run with the OOM report."""

from __future__ import annotations

import argparse
import json
import os
import signal
import warnings
from typing import TYPE_CHECKING

from rich.console import Console

from memfit._errors import InvalidInputError
from memfit.cli._command import Command

if TYPE_CHECKING:
    from memfit.monitor import Configuration

__all__ = ["add_run_parser", "run_run"]

_DEFAULT_DIR = "memfit-oom"
_DEFAULT_ENTRIES = 100_000


def add_run_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``run`` on the subcommand parsers."""
    p = sub.add_parser(
        "run",
        help="run a command with GPU memory settings; explain its CUDA out-of-memory errors",
        description="Run COMMAND unchanged with memfit's out-of-memory report installed in "
        "every Python process it starts. On torch.OutOfMemoryError the allocator snapshot and "
        "a report (what failed, where, memory at the failure, fixes ranked by the bytes they "
        "save) are written to --oom-dir. The exit code is the command's.",
        usage="memfit run [--oom-dir DIR] [--no-history] [--max-entries N] [--json]\n"
        "                  [--limit SIZE|SHARE] [--growth | --no-growth] [--preallocate]\n"
        "                  [--allocator NAME] [--framework NAME]\n"
        "                  -- COMMAND [ARG ...]",
    )
    memory = p.add_argument_group(
        "GPU memory settings",
        "Set in the command's environment before any framework starts (torch, TensorFlow "
        "and JAX read them once, at start, and ignore later changes); the lines printed "
        "before the command say what was set for which framework.",
    )
    memory.add_argument(
        "--limit",
        metavar="SIZE|SHARE",
        help="the most each process may take of each GPU: a size (8GiB) or a share (0.5, 50%%)",
    )
    memory.add_argument(
        "--growth",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="take GPU memory as needed (TensorFlow's memory growth, JAX without "
        "preallocation); --no-growth maps the pool up front",
    )
    memory.add_argument(
        "--preallocate",
        action="store_true",
        default=None,
        help="map the pool up front (--limit of it, or the framework's default share)",
    )
    memory.add_argument(
        "--allocator",
        metavar="NAME",
        help="async (cudaMallocAsync), expandable (torch's expandable segments), platform "
        "(no caching, slow), default",
    )
    memory.add_argument(
        "--framework",
        metavar="NAME",
        default="auto",
        help="torch, tensorflow, jax, several with commas (torch,jax), or auto (default: all "
        "three: the command's Python may have frameworks memfit's does not)",
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
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    env, memory = _memory_environment(args, err)
    result = run_with_report(
        command,
        args.oom_dir,
        render=oom_markdown,
        record_history=not args.no_history,
        max_entries=args.max_entries,
        env=env,
    )
    code = _exit_code(result.returncode)
    if args.json:
        print(
            json.dumps(
                {
                    "exit_code": code,
                    "memory": None if memory is None else memory.to_dict(),
                    **{k: v for k, v in result.to_dict().items() if k != "returncode"},
                },
                indent=2,
            )
        )
        return code
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


def _memory_environment(
    args: argparse.Namespace, err: Console
) -> tuple[dict[str, str] | None, Configuration | None]:
    """The child's environment with the memory settings asked for (``None``: none asked)."""
    from memfit.monitor import ConfigurationWarning, configure, settings_variable

    asked = (args.limit, args.growth, args.preallocate, args.allocator)
    if all(value is None for value in asked):
        if args.framework != "auto":
            raise InvalidInputError(
                f"--framework {args.framework} names a framework, but no memory setting was "
                "given for it: add --limit, --growth, --preallocate or --allocator."
            )
        return None, None
    env = dict(os.environ)
    with warnings.catch_warnings():
        # what is not in effect is in the lines printed below (and in --json's memory)
        warnings.simplefilter("ignore", ConfigurationWarning)
        memory = configure(
            growth=args.growth,
            limit=_limit_arg(args.limit),
            preallocate=args.preallocate,
            allocator=args.allocator,
            framework=_frameworks_arg(args.framework),
            environ=env,
        )
    env[settings_variable()] = json.dumps(
        {"settings": memory.settings, "frameworks": list(memory.frameworks)}
    )
    if not args.json:
        err.print("memfit: GPU memory settings for the command:", markup=False)
        for line in memory.lines():
            err.print(f"  {line}", markup=False)
    return env, memory


def _frameworks_arg(text: str) -> str | list[str]:
    if text == "auto":
        return "all"
    return [part.strip() for part in text.split(",") if part.strip()]


def _limit_arg(text: str | None) -> str | float | None:
    """``--limit``: a share is written 0.5 or 50%; anything else is a size."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return text
    return value if "." in text or "e" in text.lower() else text


COMMAND = Command("run", add_run_parser, run_run)
