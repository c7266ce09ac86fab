"""``memfit estimate``."""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

from memfit._errors import InvalidInputError
from memfit._estimate import estimate
from memfit._models import catalog_entries

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
    if args.batch_size is None:
        raise InvalidInputError("Give --batch-size (and --seq-len for text models).")
    status = console.status(f"Tracing {args.model} on meta tensors...") if not args.json else None
    if status is not None:
        status.start()
    try:
        result = estimate(
            args.model,
            batch_size=args.batch_size,
            seq_len=args.seq_len,
            optimizer=args.optimizer,
            precision=args.precision,
            mode=args.mode,
            activation_checkpointing=args.checkpointing,
            allocator_config=args.allocator_config,
            gpu=args.gpu,
        )
    finally:
        if status is not None:
            status.stop()
    if args.plot:
        from memfit.report import write_plot

        write_plot(result, args.plot)
    if args.json:
        print(result.to_json())
        return 0
    from memfit.report import render_estimate

    render_estimate(result, console)
    if args.plot:
        console.print(f"Plot written to {args.plot}")
    return 0
