"""The workload settings a command line was given, as the library's keyword arguments."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from memfit.cli._workload_args import TECHNIQUE_DEST
from memfit.technique import TECHNIQUES

if TYPE_CHECKING:
    from memfit.workload import WorkloadOptions

__all__ = ["check_workload_flags", "workload_options"]


def workload_options(args: argparse.Namespace) -> WorkloadOptions:
    """Every :class:`~memfit.workload.WorkloadOptions` setting the parser has a flag for (the
    flag's ``dest`` is the setting's name) and the user set; unset ones keep the library's
    defaults."""
    from memfit.workload import WorkloadOptions

    given: dict[str, Any] = {
        name: getattr(args, name)
        for name in WorkloadOptions.__annotations__
        if getattr(args, name, None) is not None
    }
    if getattr(args, "partial_checkpointing", None) is not None:
        given["activation_checkpointing"] = args.partial_checkpointing
    techniques = {
        t.option.keyword: value
        for t in TECHNIQUES
        if (value := getattr(args, TECHNIQUE_DEST + t.option.keyword, None)) is not None
    }
    if techniques:
        given["techniques"] = techniques
    return given  # type: ignore[return-value]


def check_workload_flags(args: argparse.Namespace) -> None:
    """Refuse workload flags that would be ignored together (before any work)."""
    from memfit._errors import InvalidInputError

    partial = getattr(args, "partial_checkpointing", None)
    if partial is not None and args.activation_checkpointing:
        other = (
            "--selective-checkpointing"
            if args.activation_checkpointing == "selective"
            else "--checkpointing"
        )
        raise InvalidInputError(
            f"--partial-checkpointing {partial} and {other} both say how to checkpoint: give "
            f"one of them ({other} for every block, --partial-checkpointing {partial} for "
            "that share of them)."
        )
    if args.mode == "infer" and (args.activation_checkpointing or partial is not None):
        flag = (
            "--selective-checkpointing"
            if args.activation_checkpointing == "selective"
            else "--checkpointing"
            if args.activation_checkpointing
            else f"--partial-checkpointing {partial}"
        )
        raise InvalidInputError(
            f"{flag} with --mode infer means nothing: checkpointing saves memory by "
            "recomputing activations in the backward pass, and inference has none. Drop "
            f"{flag}, or use --mode train."
        )
    if args.mode == "infer" and (getattr(args, "accumulation", None) or 1) != 1:
        raise InvalidInputError(
            f"--accumulation {args.accumulation} with --mode infer means nothing: gradient "
            "accumulation adds up gradients before an optimizer step, and inference has "
            "neither. Drop --accumulation, or use --mode train."
        )
    if args.mode == "infer" and args.optimizer is not None:
        raise InvalidInputError(
            f"--optimizer {args.optimizer} with --mode infer means nothing: inference keeps no "
            "optimizer state. Drop --optimizer, or use --mode train."
        )
