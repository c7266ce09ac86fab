"""The flags that describe a workload: the model, batch, precision and the techniques, shared
by ``estimate``, ``validate`` and ``plan`` (which reads them as the user's own configuration)."""

from __future__ import annotations

import argparse

from memfit._choices import COMPILED_CHOICES, MOE_ROUTINGS, OPTIMIZERS, PRECISIONS, STRATEGIES
from memfit.cli._help import block_fraction, positive_int, share
from memfit.technique import TECHNIQUES

TECHNIQUE_DEST = "technique_"  # a technique's flag's dest: this and the technique's keyword

__all__ = ["TECHNIQUE_DEST", "add_model_kind_args", "add_technique_args", "add_workload_args"]


def add_workload_args(p: argparse.ArgumentParser) -> None:
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
    add_model_kind_args(p)
    p.add_argument(
        "--allocator-config",
        default=None,
        metavar="CONF",
        help="a PYTORCH_CUDA_ALLOC_CONF string, e.g. expandable_segments:True",
    )
    add_technique_args(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")


def add_technique_args(p: argparse.ArgumentParser) -> None:
    """One flag per technique of the registry (``memfit.technique.TECHNIQUES``): a switch for a
    technique that is on or off, else a value of its kind."""
    for technique in TECHNIQUES:
        option = technique.option
        if not option.flag:  # asked for by another setting (an optimizer's name)
            continue
        dest = TECHNIQUE_DEST + option.keyword
        if option.kind is bool:
            p.add_argument(
                option.flag, dest=dest, action="store_true", default=None, help=option.help
            )
        else:
            p.add_argument(option.flag, dest=dest, type=option.kind, metavar="V", help=option.help)


def add_model_kind_args(p: argparse.ArgumentParser) -> None:
    """Settings for kinds of model whose memory needs an assumption: routing, compilation."""
    p.add_argument(
        "--moe-routing",
        default=None,  # None: loaded, and no note when the model routes nothing
        choices=MOE_ROUTINGS,
        metavar="R",
        help="mixture-of-experts routing to assume: loaded (experts get 0.75 to 1.25 times an "
        "even share, the default), balanced (each expert gets tokens*top_k/experts) or skewed "
        "(every token to the same top_k experts: the worst case)",
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
