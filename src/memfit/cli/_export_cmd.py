"""``memfit export``: serve per-GPU and per-process memory to Prometheus."""

from __future__ import annotations

import argparse
import json
import math
import threading

from rich.console import Console

from memfit._errors import InvalidInputError
from memfit.cli._command import Command
from memfit.cli._watch_cmd import add_monitor_args, open_monitor
from memfit.monitor import start_exporter

__all__ = ["add_export_parser", "run_export"]


def add_export_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``export`` on the subcommand parsers."""
    p = sub.add_parser(
        "export",
        help="a Prometheus exporter of GPU memory per process (with PyTorch's numbers)",
        description="Serve http://HOST:PORT/metrics for Prometheus: per GPU memory, "
        "utilisation, temperature and power; per process GPU memory labelled by pid, user, "
        "command, container and pod; and for processes that publish their stats "
        "(memfit.publish() or memfit run) torch allocated/reserved/peak and the memory outside "
        "PyTorch. Needs memfit[export]. A Grafana dashboard is in grafana/. Ctrl-C stops.",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1; 0.0.0.0 exposes users and commands to the "
        "network)",
    )
    p.add_argument("--port", type=int, default=9400, help="port to listen on (default 9400)")
    p.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="S",
        help="stop after S seconds (default: until interrupted)",
    )
    add_monitor_args(p)


def run_export(args: argparse.Namespace, console: Console) -> int:
    if not 0 <= args.port <= 65535:
        raise InvalidInputError(f"--port {args.port} is not a port; give 1-65535, e.g. 9400.")
    if args.duration is not None and not (math.isfinite(args.duration) and args.duration > 0):
        raise InvalidInputError(
            f"--duration {args.duration:g} is not accepted; give a finite number of seconds "
            "> 0, e.g. --duration 60, or leave it out to serve until interrupted."
        )
    with open_monitor(args) as monitor:
        exporter = start_exporter(monitor, args.host, args.port, args.interval)
        try:
            if args.json:
                info = {
                    "url": exporter.url,
                    "host": exporter.host,
                    "port": exporter.port,
                    "devices": monitor.devices,
                    "interval": args.interval,
                }
                print(json.dumps(info), flush=True)
            else:
                console.print(
                    f"Serving GPU memory metrics at {exporter.url} "
                    f"(GPUs {', '.join(map(str, monitor.devices))}); Ctrl-C stops.",
                    highlight=False,
                )
            threading.Event().wait(args.duration)
        except KeyboardInterrupt:
            pass
        finally:
            exporter.stop()
    return 0


COMMAND = Command("export", add_export_parser, run_export)
