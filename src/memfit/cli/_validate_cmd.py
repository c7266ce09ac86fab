"""``memfit validate``: a thin caller of :func:`memfit.validate`."""

from __future__ import annotations

import argparse

from rich.console import Console

from memfit._errors import InvalidInputError
from memfit.cli._command import Command
from memfit.cli._options import check_workload_flags, workload_options
from memfit.cli._workload_args import add_workload_args

__all__ = ["run_validate"]


def run_validate(args: argparse.Namespace, console: Console) -> int:
    if not args.model or args.batch_size is None:
        raise InvalidInputError("Give a model and --batch-size, as for memfit estimate.")
    check_workload_flags(args)
    from memfit.estimator import validate

    result = validate(args.model, **workload_options(args))
    if args.json:
        print(result.to_json())
        return 0
    from memfit.report import render_validation

    render_validation(result, console)
    return 0


def add_validate_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``validate``."""
    val = sub.add_parser(
        "validate",
        help="run the workload on this machine's GPU and compare",
        description="Estimate a workload, run it on the local CUDA GPU, and "
        "print estimate vs measured (max_memory_allocated/reserved, NVML).",
    )
    add_workload_args(val)


COMMAND = Command("validate", add_validate_parser, run_validate)
