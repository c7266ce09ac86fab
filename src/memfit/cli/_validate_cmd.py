"""``memfit validate``: estimate, run for real on the local GPU, compare."""

from __future__ import annotations

import argparse
import json
import os

from rich.console import Console
from rich.table import Table

from memfit._errors import InvalidInputError, NoGPUError
from memfit._units import format_bytes
from memfit.estimator import estimate_workload
from memfit.workload import resolve_model, workload_for

__all__ = ["run_validate"]


def _error(est: int, real: int) -> str:
    return "n/a" if real == 0 else f"{(est - real) / real * 100:+.2f}%"


def run_validate(args: argparse.Namespace, console: Console) -> int:
    import torch

    if not args.model or args.batch_size is None:
        raise InvalidInputError("Give a model and --batch-size, as for memfit estimate.")
    if not torch.cuda.is_available():
        raise NoGPUError(
            "memfit validate runs the workload on a GPU, and no CUDA GPU is available here. "
            "Use memfit estimate on machines without one."
        )
    if args.allocator_config:
        if torch.cuda.is_initialized():
            raise InvalidInputError("CUDA is already initialised; cannot apply --allocator-config.")
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = args.allocator_config
    from memfit._gpus import GPU
    from memfit.estimator import measure

    recipe = resolve_model(args.model)
    workload = workload_for(
        recipe,
        args.batch_size,
        args.seq_len,
        optimizer=args.optimizer,
        precision=args.precision,
        mode=args.mode,
        activation_checkpointing=args.checkpointing,
    )
    props = torch.cuda.get_device_properties(0)
    gpu = GPU(props.name, props.total_memory, (props.major, props.minor))
    est = estimate_workload(
        workload, name=recipe.name, allocator_config=args.allocator_config or "", gpu=gpu
    )
    real, _ = measure(workload)
    rows = [
        ("peak allocated", est.peak_allocated, real.peak_allocated),
        ("peak reserved", est.peak_reserved, real.peak_reserved),
    ]
    if args.json:
        print(json.dumps({"estimate": est.to_dict(), "measured": real.to_dict()}, indent=2))
        return 0
    table = Table(title=f"{recipe.name}: estimate vs {real.gpu_name}, torch {real.torch_version}")
    for col in ("", "estimate", "measured", "error"):
        table.add_column(col, justify="right")
    for label, e, r in rows:
        table.add_row(label, format_bytes(e), format_bytes(r), _error(e, r))
    if real.context is not None:
        table.add_row(
            "non-PyTorch (NVML - reserved)",
            format_bytes(est.non_pytorch),
            format_bytes(real.context),
            _error(est.non_pytorch, real.context),
        )
    console.print(table)
    return 0
