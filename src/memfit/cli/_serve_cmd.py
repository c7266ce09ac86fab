"""``memfit serve``: a thin caller of :func:`memfit.serving_capacity`."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from rich.console import Console

from memfit._errors import InvalidInputError
from memfit.cli._command import Command
from memfit.cli._help import positive_int

if TYPE_CHECKING:
    from memfit.estimator import ServingCapacity

__all__ = ["add_serve_parser", "run_serve"]


def add_serve_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``serve``."""
    p = sub.add_parser(
        "serve",
        help="how many sequences of a context fit when generating (serving capacity)",
        description="The largest number of sequences of --context tokens that transformers' "
        "generate runs at once on --gpu (or, with --concurrency, the longest context that many "
        "fit at): each point is generate traced on the CPU, with the weights, the KV cache as "
        "its class grows it, the prefill and decode activations, and the allocator.",
    )
    p.add_argument("model", help="catalog name, hf:ORG/NAME, hf:PATH/config.json or file.py:fn")
    p.add_argument(
        "--gpu", required=True, help="the GPU to fit: a name (h100) or a size (80GB, 24GiB)"
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--context", type=positive_int, metavar="N", help="tokens a sequence")
    what.add_argument("--concurrency", type=positive_int, metavar="N", help="sequences at once")
    p.add_argument(
        "--new-tokens",
        type=positive_int,
        default=256,
        metavar="N",
        help="tokens each request generates, within the context (default 256)",
    )
    p.add_argument(
        "--cache",
        choices=("dynamic", "static"),
        default="dynamic",
        help="transformers' cache class: dynamic (generate's default) or static",
    )
    p.add_argument(
        "--precision", "-p", default="bf16", metavar="P", help="the weights' dtype: bf16, fp16..."
    )
    p.add_argument(
        "--quantize",
        choices=("nf4", "fp4", "int8"),
        default=None,
        help="the linear layers' weights quantized by bitsandbytes as a server loads them: nf4 "
        "or fp4 (load_in_4bit), int8 (load_in_8bit)",
    )
    p.add_argument(
        "--table",
        type=positive_int,
        nargs="*",
        default=None,
        metavar="N",
        help="also the largest concurrency at each of these contexts (none given: powers of "
        "two around the answer's)",
    )
    p.add_argument(
        "--plot",
        default=None,
        metavar="FILE.png",
        help="write concurrency against context to FILE.png (with --table's contexts, by "
        "default those around the answer)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")


def run_serve(args: argparse.Namespace, console: Console) -> int:
    from memfit.estimator import serving_capacity
    from memfit.report import check_plot_path

    if args.plot is not None:  # before the traces: a plot that cannot be written costs none
        check_plot_path(args.plot, (".png",), "serving plot")
    table: tuple[int, ...] | str = tuple(args.table or ())
    if args.table == [] or (args.table is None and args.plot is not None):
        table = "around"

    def progress(traced: int, what: str) -> None:
        if not args.json:
            console.print(f"  traced {traced}: {what}", style="dim", highlight=False)

    result = serving_capacity(
        args.model,
        gpu=args.gpu,
        context=args.context,
        concurrency=args.concurrency,
        new_tokens=args.new_tokens,
        cache=args.cache,
        precision=args.precision,
        quantize=args.quantize,
        table=table,
        progress=progress,
    )
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
    else:
        from memfit.report import render_serving

        render_serving(result, console)
    if args.plot is not None:
        _write_plot(result, args.plot, console, quiet=args.json)
    return 0


def _write_plot(result: ServingCapacity, path: str, console: Console, *, quiet: bool) -> None:
    """The plot written, or one paragraph on why not (the answer above stands)."""
    from memfit.report import write_serving_png

    try:
        written = write_serving_png(result, path)
    except OSError as exc:
        raise InvalidInputError(
            f"The answer above is complete, but the plot could not be written to '{path}': "
            f"{exc.strerror or exc}. Give a path you can write to."
        ) from exc
    if not quiet:
        console.print(f"Plot written to {written}")


COMMAND = Command("serve", add_serve_parser, run_serve)
