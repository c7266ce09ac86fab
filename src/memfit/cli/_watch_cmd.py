"""``memfit watch``: live GPU memory per GPU and per process, PyTorch's numbers beside NVML's."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any

from rich.console import Console
from rich.live import Live

from memfit._errors import InvalidInputError
from memfit.cli._command import Command
from memfit.monitor import Monitor, Sample, parse_devices
from memfit.report import SampleLog, WatchHistory, render_sample, watch_frame

__all__ = ["add_monitor_args", "add_watch_parser", "open_monitor", "run_watch"]


def add_monitor_args(p: argparse.ArgumentParser) -> None:
    """The options ``watch`` and ``export`` share: GPU selection, interval, replay."""
    p.add_argument(
        "--devices",
        "--id",
        "-i",
        dest="devices",
        default=None,
        metavar="LIST",
        help="GPUs to show, as nvidia-smi numbers them: 0 or 0,2 (default: all)",
    )
    p.add_argument(
        "--interval", "-n", type=float, default=1.0, metavar="S", help="seconds between samples"
    )
    p.add_argument(
        "--replay",
        default=None,
        metavar="FILE",
        help="read a recording of benchmarks/nvml_record.py instead of the driver",
    )
    p.add_argument(
        "--scenario", default=None, help="with --replay: which recorded scenario (default: first)"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")


def add_watch_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``watch`` on the subcommand parsers."""
    p = sub.add_parser(
        "watch",
        help="live GPU memory per process, with PyTorch's allocated/reserved beside NVML's",
        description="Show each GPU's memory and utilisation, and each process's GPU memory, "
        "user and command, refreshed every --interval seconds (like nvidia-smi -l 1). For "
        "PyTorch processes that call memfit.publish() or run under memfit run, also their "
        "allocated, reserved and peak memory, and the memory outside PyTorch (CUDA context, "
        "libraries, NCCL). Ctrl-C stops.",
    )
    add_monitor_args(p)
    p.add_argument("--once", action="store_true", help="print one sample and exit")
    p.add_argument("--count", type=int, default=None, metavar="N", help="stop after N samples")
    p.add_argument(
        "--log",
        default=None,
        metavar="FILE",
        help="append every sample to FILE (.csv: a row per GPU and process; .jsonl: a sample "
        "a line); without a terminal, only log",
    )
    p.add_argument(
        "--history", type=int, default=40, metavar="N", help="samples in the history column"
    )


def open_monitor(args: argparse.Namespace) -> Monitor:
    """The monitor the options ask for: the driver, or a recording (``--replay``)."""
    if not (math.isfinite(args.interval) and args.interval > 0):
        raise InvalidInputError(
            f"--interval {args.interval:g} is not accepted; give a finite number of seconds "
            "> 0, e.g. --interval 1."
        )
    devices = None if args.devices is None else parse_devices(args.devices)
    if args.replay is None:
        if args.scenario is not None:
            raise InvalidInputError("--scenario goes with --replay FILE; give both or neither.")
        return Monitor(devices=devices)
    return Monitor.from_recording(args.replay, args.scenario, devices=devices)


def _emit_json(sample: Sample) -> None:
    print(json.dumps(sample.to_dict()), flush=True)


def run_watch(args: argparse.Namespace, console: Console) -> int:
    try:
        return _watch(args, console)
    except BrokenPipeError:  # the reader went away (memfit watch --json | head): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _watch(args: argparse.Namespace, console: Console) -> int:
    if args.count is not None and args.count < 1:
        raise InvalidInputError(f"--count {args.count} is not accepted; give 1 or more.")
    if args.history < 1:
        raise InvalidInputError(f"--history {args.history} is not accepted; give 1 or more.")
    with open_monitor(args) as monitor:
        if args.once:
            sample = monitor.sample()
            if args.log:
                with SampleLog(args.log) as once_log:
                    once_log.write(sample)
            if args.json:
                print(json.dumps(sample.to_dict(), indent=2))
            else:
                render_sample(sample, console)
            return 0
        log = SampleLog(args.log) if args.log else None
        try:
            _loop(args, monitor, console, log)
        except KeyboardInterrupt:
            pass  # the usual way to stop watching
        finally:
            if log is not None:
                log.close()
    return 0


def _loop(
    args: argparse.Namespace, monitor: Monitor, console: Console, log: SampleLog | None
) -> None:
    """Show (or log) each sample of the monitor's loop as it comes."""
    history = WatchHistory(args.history)
    live = not args.json and console.is_terminal
    quiet = log is not None and not console.is_terminal and not args.json
    with Live(console=console, auto_refresh=False, transient=False) if live else _Null() as view:
        for sample in monitor.samples(args.interval, args.count):
            history.add(sample)
            if log is not None:
                log.write(sample)
            if args.json:
                _emit_json(sample)
            elif live:
                view.update(watch_frame(sample, history), refresh=True)
            elif not quiet:
                console.print(watch_frame(sample, history))


class _Null:
    """Stands in for ``rich.live.Live`` when there is no terminal to redraw."""

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


COMMAND = Command("watch", add_watch_parser, run_watch)
