"""``memfit estimate``: one estimate, or with ``--max-batch-size`` the batch-size search.

Every flag is checked before the trace (which takes seconds): combinations that mean nothing
are refused, and a ``--plot`` path is checked (suffix, folder, matplotlib for PNG). A plot that
still fails to write is reported after the estimate is printed, never instead of it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console

from memfit._errors import InvalidInputError, NoGPUError
from memfit.cli._command import Command
from memfit.cli._options import check_workload_flags, workload_options
from memfit.cli._workload_args import add_workload_args

__all__ = ["run_estimate"]

_DEFAULT_MARGIN = "0.02"  # what --max-batch-size keeps free when --margin is not given


def _list_models(console: Console, as_json: bool) -> int:
    from memfit.workload import catalog_entries  # torch: only when the catalog is asked for

    entries = catalog_entries()
    if as_json:
        keys = ("name", "aliases", "source", "task", "parameters", "description")
        print(json.dumps([{k: e.get(k) for k in keys} for e in entries.values()], indent=2))
        return 0
    from memfit.report import render_catalog

    render_catalog(entries, console)
    return 0


def _check_list_flags(args: argparse.Namespace) -> None:
    """``--list-models`` takes no workload: refuse the flags it would ignore."""
    given = [
        text
        for text, value in (
            (args.model, args.model),
            ("--batch-size", args.batch_size),
            ("--seq-len", args.seq_len),
            ("--gpu", args.gpu),
            ("--plot", args.plot),
            ("--max-batch-size", args.max_batch_size),
        )
        if value
    ]
    if given:
        raise InvalidInputError(
            f"--list-models lists the catalog and takes no workload, but {', '.join(given)} "
            "was given. Run 'memfit estimate --list-models' (with --json if you like) alone, "
            "then estimate a model from it."
        )


def _check_flags(args: argparse.Namespace) -> None:
    """Refuse what cannot work or would be ignored, before any work."""
    if not args.model:
        raise InvalidInputError(
            "Give a model, e.g. 'memfit estimate bert-base-uncased -b 32 "
            "-s 512'; 'memfit estimate --list-models' lists the catalog."
        )
    check_workload_flags(args)
    if args.max_batch_size:
        if args.batch_size is not None:
            raise InvalidInputError(
                f"--batch-size {args.batch_size} and --max-batch-size contradict each other: "
                "--max-batch-size searches for the batch size. Drop --batch-size to search, "
                "or drop --max-batch-size to estimate batch size "
                f"{args.batch_size}."
            )
        return
    if args.confirm:
        raise InvalidInputError(
            "--confirm goes with --max-batch-size (it confirms the largest batch on this "
            "machine's GPU); to check one batch size on the GPU, use memfit validate."
        )
    if args.margin is not None:
        raise InvalidInputError(
            f"--margin {args.margin} goes with --max-batch-size (the memory the search keeps "
            "free); an estimate has no margin. Add --max-batch-size, or drop --margin."
        )
    if args.batch_size is None:
        raise InvalidInputError(
            "Give --batch-size (and --seq-len for text models), e.g. -b 8 -s 512, or "
            "--max-batch-size to search for the largest batch that fits --gpu."
        )


def estimate(model: Any, **options: Any) -> Any:
    """:func:`memfit.estimate`, imported when the command runs (it brings torch), not when
    ``memfit --help`` builds the parser."""
    from memfit.estimator import estimate as run

    return run(model, **options)


def run_estimate(args: argparse.Namespace, console: Console) -> int:
    if args.list_models:
        _check_list_flags(args)
        return _list_models(console, args.json)
    _check_flags(args)
    if args.max_batch_size:
        return _max_batch_size(args, console)
    write_plot = _plot_writer(args.plot, batch_search=False)
    if args.probe_convolutions:
        _probe(args, console)
    with _status(console, args, f"Tracing {args.model} on meta tensors..."):
        result = estimate(args.model, **workload_options(args))
    if args.json:
        print(result.to_json(), flush=True)
    else:
        from memfit.report import render_estimate

        render_estimate(result, console)
    _write_plot(write_plot, result, args, console)
    return 0


def _probe(args: argparse.Namespace, console: Console) -> None:
    """``--probe-convolutions``: measure the workload's unmeasured convolutions on this GPU
    first (kept for later estimates), saying what it did on stderr."""
    from memfit.estimator import probe_convolutions

    err = Console(stderr=True, width=console.width)
    with _status(console, args, f"Probing {args.model}'s convolutions on this GPU...") as status:

        def progress(done: int, total: int) -> None:
            if status is not None:
                status.update(f"Probing convolution {done} of {total} on this GPU...")

        found = probe_convolutions(args.model, progress=progress, **workload_options(args))
    if args.json:
        return
    words = f"{found.probed} of {found.missing} convolutions not in memfit's table probed"
    err.print(f"{words} on the {found.gpu} in {found.seconds:.1f} s, kept in {found.path}")
    for failure in found.failed:
        err.print(f"  not probed: {failure}")


def _plot_writer(path: str | None, *, batch_search: bool) -> Callable[[Any, str], None] | None:
    """The writer of ``--plot`` (``None`` without one), after checking the path: before the
    work, so that a plot that cannot be written costs no trace."""
    if path is None:
        return None
    from memfit.report import (
        BATCH_PLOT_SUFFIXES,
        PLOT_SUFFIXES,
        check_plot_path,
        write_batch_size_plot,
        write_estimate_plot,
    )

    if batch_search:
        check_plot_path(path, BATCH_PLOT_SUFFIXES, "batch-size plot")
        return write_batch_size_plot
    check_plot_path(path, PLOT_SUFFIXES)
    return write_estimate_plot


def _write_plot(
    writer: Callable[[Any, str], None] | None,
    result: object,
    args: argparse.Namespace,
    console: Console,
) -> None:
    """Write the plot once the result is printed; a failure is an error of its own (exit 1)
    that leaves the printed result in place."""
    if writer is None:
        return
    try:
        writer(result, args.plot)
    except OSError as exc:
        raise InvalidInputError(
            f"The result above is complete, but the plot could not be written to "
            f"'{args.plot}': {exc.strerror or exc}. Give a path you can write to."
        ) from exc
    if not args.json:
        console.print(f"Plot written to {args.plot}", soft_wrap=True, highlight=False)


@contextmanager
def _status(console: Console, args: argparse.Namespace, text: str) -> Iterator[Any]:
    """A spinner while the CPU works (yielded, to change its text), unless the output is
    JSON (then None)."""
    if args.json:
        yield None
        return
    with console.status(text) as status:
        yield status


def _max_batch_size(args: argparse.Namespace, console: Console) -> int:
    """``--max-batch-size``: the estimator's search, and with ``--confirm`` GPU trials."""
    from memfit.runtime import find_batch_size

    text = _DEFAULT_MARGIN if args.margin is None else args.margin
    try:
        margin: float | str = float(text)
    except ValueError:
        margin = text  # a size such as 512MiB
    write_plot = _plot_writer(args.plot, batch_search=True)
    if args.confirm:
        import torch

        if not torch.cuda.is_available():
            raise NoGPUError(
                "--confirm runs trials on this machine's GPU, and none is available here. "
                "Drop --confirm and give --gpu (a name such as h100 or a size such as 24GiB) "
                "for the estimator's answer without a GPU."
            )
    how = "Searching batch sizes" + (" and trying them on the GPU" if args.confirm else "")
    with _status(console, args, f"{how} for {args.model}..."):
        result = find_batch_size(
            args.model, margin=margin, confirm=args.confirm, **workload_options(args)
        )
    if args.json:
        print(result.to_json(), flush=True)
    else:
        from memfit.report import render_batch_size

        render_batch_size(result, args.model, console)
    _write_plot(write_plot, result, args, console)
    return 0


def add_estimate_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``estimate``."""
    est = sub.add_parser(
        "estimate",
        help="predict the peak memory of a step, on the CPU",
        description="Predict the peak GPU memory of a training or inference "
        "step on the CPU, without a GPU. Sizes print in binary units (GiB).",
    )
    add_workload_args(est)
    est.add_argument(
        "--gpu",
        default=None,
        metavar="GPU|SIZE",
        help="target: 4090, a100-40g, a100-80g, h100, h200, ... or a size (24GiB); "
        "default: no verdict, kernels traced as for an h100",
    )
    est.add_argument(
        "--plot",
        default=None,
        metavar="FILE",
        help="write memory over the step to FILE (.png, .html or .svg)",
    )
    est.add_argument("--list-models", action="store_true", help="list the bundled catalog")
    est.add_argument(
        "--max-batch-size",
        action="store_true",
        help="find the largest batch size that fits --gpu (estimates only; --confirm: GPU trials)",
    )
    est.add_argument(
        "--margin",
        default=None,  # None: not given (then 0.02), so that a --margin alone can be refused
        metavar="F|SIZE",
        help="with --max-batch-size: memory kept free, a fraction or a size such as 512MiB "
        "(default: 0.02)",
    )
    est.add_argument(
        "--probe-convolutions",
        action="store_true",
        help="first measure, on this machine's GPU, the cuDNN workspaces of the model's "
        "convolutions memfit has not measured, and keep them for later estimates",
    )
    est.add_argument(
        "--confirm",
        action="store_true",
        help="with --max-batch-size: confirm the answer on this machine's GPU (at most 3 trials)",
    )


COMMAND = Command("estimate", add_estimate_parser, run_estimate)
