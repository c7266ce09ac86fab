"""``memfit estimate``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.table import Table

from memfit._errors import InvalidInputError, NoGPUError
from memfit.cli._options import workload_options
from memfit.estimator import estimate
from memfit.workload import catalog_entries

__all__ = ["run_estimate"]


def _list_models(console: Console, as_json: bool) -> int:
    entries = catalog_entries()
    if as_json:
        print(
            json.dumps(
                [
                    {
                        k: e.get(k)
                        for k in ("name", "aliases", "source", "task", "parameters", "description")
                    }
                    for e in entries.values()
                ],
                indent=2,
            )
        )
        return 0
    table = Table(title="Bundled models (no download needed)")
    for col in ("name", "aliases", "source", "parameters", "description"):
        table.add_column(col)
    for e in entries.values():
        table.add_row(
            e["name"],
            ", ".join(e.get("aliases", [])),
            e["source"],
            f"{e['parameters'] / 1e6:,.0f}M",
            e.get("description", ""),
        )
    console.print(table)
    return 0


def run_estimate(args: argparse.Namespace, console: Console) -> int:
    if args.list_models:
        return _list_models(console, args.json)
    if not args.model:
        raise InvalidInputError(
            "Give a model, e.g. 'memfit estimate bert-base-uncased -b 32 "
            "-s 512'; 'memfit estimate --list-models' lists the catalog."
        )
    if args.max_batch_size:
        return _max_batch_size(args, console)
    if args.confirm:
        raise InvalidInputError(
            "--confirm goes with --max-batch-size (it confirms the largest batch on this "
            "machine's GPU); to check one batch size on the GPU, use memfit validate."
        )
    if args.batch_size is None:
        raise InvalidInputError("Give --batch-size (and --seq-len for text models).")
    with _status(console, args, f"Tracing {args.model} on meta tensors..."):
        result = estimate(args.model, **workload_options(args))
    if args.plot:
        from memfit.report import write_estimate_plot

        write_estimate_plot(result, args.plot)
    if args.json:
        print(result.to_json())
        return 0
    from memfit.report import render_estimate

    render_estimate(result, console)
    if args.plot:
        console.print(f"Plot written to {args.plot}", soft_wrap=True, highlight=False)
    return 0


@contextmanager
def _status(console: Console, args: argparse.Namespace, text: str) -> Iterator[None]:
    """A spinner while the CPU works, unless the output is JSON."""
    if args.json:
        yield
        return
    with console.status(text):
        yield


def _max_batch_size(args: argparse.Namespace, console: Console) -> int:
    """``--max-batch-size``: the estimator's search, and with ``--confirm`` GPU trials."""
    from memfit.runtime import find_batch_size

    try:
        margin: float | str = float(args.margin)
    except ValueError:
        margin = args.margin  # a size such as 512MiB
    if args.plot:
        from memfit.report import batch_size_plot_path, write_batch_size_png

        batch_size_plot_path(args.plot)  # before the search: a bad path fails at once
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
    if args.plot:
        write_batch_size_png(result, args.plot)
    if args.json:
        print(result.to_json())
        return 0
    from memfit.report import render_batch_size

    render_batch_size(result, args.model, console)
    if args.plot:
        console.print(f"Plot written to {args.plot}", soft_wrap=True, highlight=False)
    return 0
