"""``memfit serve``: a thin caller of :func:`memfit.serving_capacity`."""

from __future__ import annotations

import argparse
import json

from rich.console import Console

from memfit.cli._command import Command
from memfit.cli._help import positive_int

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
        "--table",
        type=positive_int,
        nargs="+",
        default=(),
        metavar="N",
        help="also the largest concurrency at each of these contexts",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")


def run_serve(args: argparse.Namespace, console: Console) -> int:
    from memfit.estimator import serving_capacity

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
        table=tuple(args.table),
        progress=progress,
    )
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
        return 0
    from memfit.report import render_serving

    render_serving(result, console)
    return 0


COMMAND = Command("serve", add_serve_parser, run_serve)
