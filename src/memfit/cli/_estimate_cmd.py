"""``memfit estimate``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from memfit._errors import InvalidInputError, NoGPUError
from memfit.estimator import estimate
from memfit.workload import catalog_entries

if TYPE_CHECKING:
    from memfit.runtime import BatchSizeResult

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
        result = estimate(args.model, batch_size=args.batch_size, **_workload_kwargs(args))
    if args.plot:
        from memfit.report import write_plot

        write_plot(result, args.plot)
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


def _workload_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "seq_len": args.seq_len,
        "optimizer": args.optimizer,
        "precision": args.precision,
        "mode": args.mode,
        "activation_checkpointing": args.checkpointing,
        "allocator_config": args.allocator_config,
        "gpu": args.gpu,
    }


def _max_batch_size(args: argparse.Namespace, console: Console) -> int:
    """``--max-batch-size``: the estimator's search, and with ``--confirm`` GPU trials."""
    from memfit.runtime._batch_size import find_batch_size

    try:
        margin: float | str = float(args.margin)
    except ValueError:
        margin = args.margin  # a size such as 512MiB
    if args.plot:
        from memfit.report._batch_png import batch_size_plot_path, write_batch_size_png

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
            args.model, margin=margin, confirm=args.confirm, **_workload_kwargs(args)
        )
    if args.plot:
        write_batch_size_png(result, args.plot)
    if args.json:
        print(result.to_json())
        return 0
    _render_search(result, args.model, console)
    if args.plot:
        console.print(f"Plot written to {args.plot}", soft_wrap=True, highlight=False)
    return 0


def _render_search(result: BatchSizeResult, model: str, console: Console) -> None:
    from memfit._units import format_bytes

    table = Table(title=f"{model}: batch sizes estimated on {result.gpu}")
    for col in ("batch size", "peak reserved", "runs in", "with CUDA context", "fits"):
        table.add_column(col, justify="right")
    for p in result.estimates:
        fits = "yes" if p.total <= result.budget else "no"
        table.add_row(
            str(p.batch_size),
            format_bytes(p.peak_reserved),
            format_bytes(p.need),
            format_bytes(p.total),
            fits,
        )
    console.print(table)
    console.print(
        "peak reserved: with memory to spare; runs in: the least the step needs, as the "
        "caching allocator frees its cache and retries when the GPU is full",
        style="dim",
        highlight=False,
    )
    for t in result.trials:
        console.print(
            f"GPU trial at batch {t.batch_size}: {t.outcome}, measured peak reserved "
            f"{format_bytes(t.peak_reserved)} (predicted {format_bytes(t.predicted_reserved)}), "
            f"{t.seconds:.1f} s",
            highlight=False,
        )
    limit = " (the max_batch limit)" if result.limited_by == "max_batch" else ""
    how = f", confirmed in {len(result.trials)} GPU trial(s)" if result.confirmed else ""
    console.print(
        f"Largest batch size: [bold]{result.batch_size}[/]{limit}{how} · budget "
        f"{format_bytes(result.budget)} = {format_bytes(result.gpu_total)} less a margin of "
        f"{format_bytes(result.margin)} · {len(result.estimates)} estimates in "
        f"{result.estimate_seconds:.1f} s · about {format_bytes(result.per_sample)} a sample",
        highlight=False,
    )
    note = result.pressure_note()
    if note:
        console.print(f"Note: batch {result.batch_size} {note}.", style="yellow", highlight=False)
