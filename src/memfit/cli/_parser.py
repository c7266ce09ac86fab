"""The argument parser, built by a factory so tests can call it."""

from __future__ import annotations

import argparse
from importlib.metadata import PackageNotFoundError, version

from memfit._choices import COMPILED_CHOICES, MOE_ROUTINGS, OPTIMIZERS, PRECISIONS, STRATEGIES
from memfit.cli._calibrate_cmd import add_calibrate_parser
from memfit.cli._doctor_cmd import add_doctor_parser
from memfit.cli._export_cmd import add_export_parser
from memfit.cli._help import HelpFormatter, block_fraction, epilog, positive_int, share
from memfit.cli._plan_cmd import add_plan_parser
from memfit.cli._run_cmd import add_run_parser
from memfit.cli._snapshot_cmd import add_snapshot_parser
from memfit.cli._watch_cmd import add_watch_parser

__all__ = ["make_parser"]

_DEBUG_HELP = "show the traceback of an error (before or after the command)"


def _workload_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "model",
        nargs="?",
        help="catalog name, hf:ORG/NAME or hf:PATH/config.json, "
        "tv:NAME, timm:NAME, or path/to/file.py:factory (beside the factory, optionally: "
        "make_batch(batch_size, seq_len), and loss_fn(model, batch) or a whole "
        "step(model, batch[, optimizer]) with make_optimizer(model))",
    )
    p.add_argument(
        "--batch-size",
        "-b",
        type=positive_int,
        default=None,
        metavar="N",
        help="samples per step (per micro-batch with --accumulation)",
    )
    p.add_argument(
        "--seq-len",
        "-s",
        type=positive_int,
        default=None,
        metavar="N",
        help="tokens per sample (text models only)",
    )
    p.add_argument(
        "--precision",
        "-p",
        default="fp32",
        choices=PRECISIONS,
        metavar="P",
        help="how parameters and activations are stored: " + ", ".join(PRECISIONS),
    )
    p.add_argument(
        "--optimizer",
        "-o",
        default=None,  # None: not given (then adamw), so that -o with --mode infer is refused
        choices=OPTIMIZERS,
        metavar="OPT",
        help="the optimizer whose state is kept, in training: "
        + ", ".join(OPTIMIZERS)
        + " (default: adamw)",
    )
    p.add_argument(
        "--mode",
        default="train",
        choices=("train", "infer"),
        metavar="MODE",
        help="train: forward, backward and optimizer step; infer: forward only, no gradients",
    )
    p.add_argument(
        "--accumulation",
        type=positive_int,
        default=None,
        metavar="N",
        help="gradient accumulation: N micro-batches of --batch-size each, their gradients "
        "added up before each optimizer step (train only)",
    )
    checkpointing = p.add_mutually_exclusive_group()
    checkpointing.add_argument(
        "--checkpointing",
        dest="activation_checkpointing",
        action="store_true",
        help="activation checkpointing: recompute activations in backward (train only)",
    )
    checkpointing.add_argument(
        "--selective-checkpointing",
        dest="activation_checkpointing",
        action="store_const",
        const="selective",
        help="checkpoint each repeated block, keeping what matrix products and attention "
        "return and recomputing the rest (train only)",
    )
    p.add_argument(  # not in the group: its usage line would pass 80 columns; checked there
        "--partial-checkpointing",
        dest="partial_checkpointing",
        type=block_fraction,
        metavar="F",
        help="checkpoint the share F (between 0 and 1) of the repeated blocks in full, spread "
        "evenly, and keep everything of the others (train only)",
    )
    _model_kind_args(p)
    p.add_argument(
        "--allocator-config",
        default=None,
        metavar="CONF",
        help="a PYTORCH_CUDA_ALLOC_CONF string, e.g. expandable_segments:True",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")


def _model_kind_args(p: argparse.ArgumentParser) -> None:
    """Settings for kinds of model whose memory needs an assumption: routing, compilation."""
    p.add_argument(
        "--moe-routing",
        default=None,  # None: balanced, and no note when the model routes nothing
        choices=MOE_ROUTINGS,
        metavar="R",
        help="mixture-of-experts routing to assume: balanced (each expert gets tokens*top_k/"
        "experts, the default) or skewed (every token to the same top_k experts: the worst case)",
    )
    p.add_argument(
        "--compiled",
        default=None,  # None: a model compiled with torch.compile is refused
        choices=COMPILED_CHOICES,
        metavar="HOW",
        help="a model compiled with torch.compile: 'eager' estimates its uncompiled step "
        "instead, which usually needs more memory (a compiled step usually saves fewer "
        "activations); without it, a compiled model is refused",
    )
    p.add_argument(
        "--offload",
        type=share,
        nargs="?",
        const=1.0,
        default=None,  # None: no activation offload
        metavar="F",
        help="offload what the blocks save for the backward to pinned host memory, copied on a "
        "side stream and back one block ahead: every block not checkpointed, or the share F "
        "of them (train only; see memfit.offload_activations)",
    )
    p.add_argument(
        "--offload-checkpoints",
        action="store_true",
        default=None,  # None: the checkpointed blocks keep their inputs on the GPU
        help="offload the inputs the checkpointed blocks keep for their recompute to pinned "
        "host memory too (with --checkpointing: below full checkpointing's memory)",
    )
    p.add_argument(
        "--gpus",
        dest="world_size",
        type=positive_int,
        default=None,
        metavar="N",
        help="the ranks of a data-parallel job (with --strategy): each rank's memory is estimated",
    )
    p.add_argument(
        "--strategy",
        default=None,
        choices=STRATEGIES,
        metavar="NAME",
        help="data-parallel strategy: ddp (each rank holds the model and its gradient buckets), "
        "fsdp2 (each rank holds a shard of the parameters, gradients and optimizer states), zero1, "
        "zero2 or zero3 (DeepSpeed's ZeRO stages; memfit[zero])",
    )
    p.add_argument(
        "--batch-held",
        dest="batch_held",
        action=argparse.BooleanOptionalAction,
        default=None,  # None: estimate lets each micro-batch's inputs go; plan holds the batch
        help="your loop holds the whole batch on the GPU while the step runs (it moved the batch "
        "there, then called the step): counted through the step (memfit plan's default; "
        "--no-batch-held: the inputs go after each micro-batch's forward, estimate's default)",
    )
    p.add_argument(
        "--offload-shards",
        action="store_true",
        default=None,  # None: FSDP2 keeps the shards on the GPU
        help="with --strategy fsdp2: FSDP2's CPU offload policy, each rank's shards of the "
        "parameters, gradients and optimizer states in host memory, the optimizer stepped there",
    )
    p.add_argument(
        "--activation-memory-budget",
        type=share,
        default=None,  # None: the process's torch._functorch.config setting (1.0)
        metavar="F",
        help="a torch.compile'd model's activation memory budget: the share F (0 to 1) of its "
        "activations the compiled forward may save, the rest recomputed (train only)",
    )


def _version() -> str:
    """The installed memfit's version (the package's metadata: no package imports the root,
    where ``memfit.__version__`` says the same, ``tests/cli`` checks it)."""
    try:
        return version("memfit")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "(not installed)"


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memfit",
        description="Know, fit and watch GPU memory in PyTorch.",
        epilog=epilog("memfit"),
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"memfit {_version()}")
    parser.add_argument("--debug", action="store_true", help=_DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    est = sub.add_parser(
        "estimate",
        help="predict the peak memory of a step, on the CPU",
        description="Predict the peak GPU memory of a training or inference "
        "step on the CPU, without a GPU. Sizes print in binary units (GiB).",
    )
    _workload_args(est)
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
        "--confirm",
        action="store_true",
        help="with --max-batch-size: confirm the answer on this machine's GPU (at most 3 trials)",
    )

    val = sub.add_parser(
        "validate",
        help="run the workload on this machine's GPU and compare",
        description="Estimate a workload, run it on the local CUDA GPU, and "
        "print estimate vs measured (max_memory_allocated/reserved, NVML).",
    )
    _workload_args(val)
    add_plan_parser(sub, _workload_args)
    add_calibrate_parser(sub)
    add_snapshot_parser(sub)
    add_run_parser(sub)
    add_watch_parser(sub)
    add_doctor_parser(sub)
    add_export_parser(sub)
    for name, command in sub.choices.items():  # also after the command: memfit estimate ... --debug
        command.formatter_class = HelpFormatter
        command.epilog = epilog(name)
        command.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help=_DEBUG_HELP
        )
    return parser
