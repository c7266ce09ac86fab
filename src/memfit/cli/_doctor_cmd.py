"""``memfit doctor``: the GPUs, frameworks and memory settings of this machine, and what to
change."""

from __future__ import annotations

import argparse
import json

from rich.console import Console

from memfit.cli._command import Command
from memfit.monitor import diagnose
from memfit.report import render_doctor

__all__ = ["add_doctor_parser", "run_doctor"]


def add_doctor_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``doctor`` on the subcommand parsers."""
    p = sub.add_parser(
        "doctor",
        help="this machine's GPUs, frameworks and memory settings, and what to change",
        description="Read, without starting any framework's GPU runtime: the NVIDIA driver "
        "and the CUDA it supports, each GPU (memory, MIG, processes on it), torch, TensorFlow "
        "and JAX as installed and their CUDA builds, and the memory settings each framework "
        "reads from the environment when it starts (PYTORCH_CUDA_ALLOC_CONF, "
        "TF_FORCE_GPU_ALLOW_GROWTH, XLA_PYTHON_CLIENT_PREALLOCATE...); then what to change, "
        "with the reason. Exits 1 when a setting is wrong (advice marked error), else 0.",
    )
    p.add_argument("--json", action="store_true", help="print the findings as JSON")


def run_doctor(args: argparse.Namespace, console: Console) -> int:
    found = diagnose()
    if args.json:
        print(json.dumps(found.to_dict(), indent=2))
    else:
        render_doctor(found, console)
    return 1 if any(a.severity == "error" for a in found.advice) else 0


COMMAND = Command("doctor", add_doctor_parser, run_doctor)
