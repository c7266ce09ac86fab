"""``memfit snapshot FILE``: explain a recorded memory snapshot."""

from __future__ import annotations

import argparse

from rich.console import Console

from memfit._errors import InvalidInputError
from memfit._gpus import resolve_gpu
from memfit.cli._command import Command

__all__ = ["add_snapshot_parser", "run_snapshot"]


def add_snapshot_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``snapshot`` on the subcommand parsers."""
    p = sub.add_parser(
        "snapshot",
        help="explain a memory snapshot (torch.cuda.memory._dump_snapshot)",
        description="Read a snapshot saved by torch.cuda.memory._dump_snapshot (.pickle or "
        ".pickle.gz) without running code from it; show the peaks, what is alive at the "
        "peak, fragmentation, and what other allocator settings would have reserved. Sizes "
        "print in binary units (GiB).",
    )
    p.add_argument("file", help="the snapshot file (.pickle or .pickle.gz)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument(
        "--html", default=None, metavar="OUT.html", help="also write a self-contained HTML report"
    )
    p.add_argument("--top", type=int, default=10, metavar="N", help="rows in the top lists")
    p.add_argument(
        "--capacity",
        default=None,
        metavar="GPU|SIZE",
        help="GPU memory for the what-ifs: h100, a100-40g, 24GiB, ... (default: none)",
    )
    p.add_argument("--device", type=int, default=None, help="which GPU's trace (default: busiest)")
    p.add_argument("--no-what-if", action="store_true", help="skip the what-if replays")


def run_snapshot(args: argparse.Namespace, console: Console) -> int:
    import memfit.snapshot as snapshot
    from memfit.report import check_plot_path, render_snapshot, write_snapshot_html

    if args.top < 1:
        raise InvalidInputError(f"--top {args.top} is not accepted; give a number of rows >= 1.")
    capacity = resolve_gpu(args.capacity).total if args.capacity else None
    if args.html:  # before the replays: a page that cannot be written costs no work
        check_plot_path(args.html, (".html", ".htm"), "HTML report")
    status = console.status(f"Reading and replaying {args.file}...") if not args.json else None
    if status is not None:
        status.start()
    try:
        # given the path, the what-ifs start while the file is read
        result = snapshot.report(
            args.file,
            device=args.device,
            capacity=capacity,
            top=args.top,
            what_if=not args.no_what_if,
        )
    finally:
        if status is not None:
            status.stop()
    if args.json:
        print(result.to_json(), flush=True)
    else:
        render_snapshot(result, console)
    if args.html:  # after the report is shown: a page that fails to write takes it not away
        try:
            write_snapshot_html(result, args.html)
        except OSError as exc:
            raise InvalidInputError(
                f"The report above is complete, but the HTML report could not be written to "
                f"'{args.html}': {exc.strerror or exc}. Give a path you can write to (a "
                "folder with free space)."
            ) from exc
        if not args.json:
            console.print(f"HTML report written to {args.html}", highlight=False, markup=False)
    return 0


COMMAND = Command("snapshot", add_snapshot_parser, run_snapshot)
