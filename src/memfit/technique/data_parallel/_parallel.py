"""Data-parallel training steps: DDP and FSDP2, traced on a fake process group.

``strategy="ddp"`` wraps the model in ``DistributedDataParallel`` after memfit's own wrapping
(checkpointing, offload), as a training script does, with DDP's defaults: its construction
broadcasts the parameters from rank 0 (flattened into buffers of about 250 MB, then freed) and
its reducer allocates the gradient buckets (one flat buffer per dtype at first), into which each
gradient is copied as backward makes it, all-reduced, and copied back. All of it goes through
the caching allocator, so a trace sees it: on the meta device the process group is PyTorch's
fake one (``backend="fake"``, of ``world_size`` ranks), whose all-reduce is answered with the
bucket itself, as an in-place NCCL all-reduce leaves it. On a GPU, ``memfit validate`` runs one
rank of its own (NCCL, a world of one) where no process group is set up.

``strategy="fsdp2"`` runs PyTorch's ``fully_shard`` itself on the meta device
(``_fsdp``): the shards, the all-gather and reduce-scatter buffers on their streams,
prefetch and resharding are the installed torch's.

NCCL's own device memory, outside the caching allocator, is the estimate's non-PyTorch memory:
490 MiB measured with one rank on the H200 (``memfit.estimator``); more ranks take more, not
measured yet. Not modelled yet: what makes the ranks of a multi-GPU job differ beyond their
shards (DDP's measured rank-0 surplus). ZeRO 1-3 run DeepSpeed's engine (``_zero``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from memfit._choices import STRATEGIES
from memfit._errors import InvalidInputError
from memfit.technique.data_parallel._fsdp import MetaStreams, check_wrapped, meta_fsdp, shard_model
from memfit.technique.data_parallel._zero import ZERO, check_zero, meta_accelerator
from memfit.technique.in_backward import in_backward

# the strategies whose own mixed precision replaces autocast (FSDP2's policy, DeepSpeed's bf16)
CASTS_ITSELF = ("fsdp2", *ZERO)

__all__ = [
    "CASTS_ITSELF",
    "FAKE_RANK_NOTE",
    "STRATEGIES",
    "check_offload_shards",
    "check_parallel",
    "check_parallelize",
    "check_sharded_optimizer",
    "parallel_group",
    "parallel_note",
    "parallelize",
]


def check_parallel(
    world_size: object, strategy: object, mode: str, precision: str = "fp32"
) -> None:
    """``world_size`` is a count of ranks and ``strategy`` one memfit estimates."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise InvalidInputError(
            f"world_size={world_size!r} is not a number of ranks: give a whole number >= 1, "
            "e.g. world_size=8 (the GPUs the job runs on)."
        )
    if strategy is None:
        if world_size > 1:
            raise InvalidInputError(
                f"world_size={world_size} without a strategy: give strategy='ddp' (each rank "
                "holds the whole model and all-reduces its gradients), 'fsdp2' or 'zero1'-"
                "'zero3' (each shards what the model holds), or world_size=1."
            )
        return
    if strategy not in STRATEGIES:
        raise InvalidInputError(
            f"strategy={strategy!r} is not a data-parallel strategy memfit knows: give 'ddp', "
            "'fsdp2', 'zero1', 'zero2' or 'zero3'."
        )
    if strategy in ZERO:
        check_zero(strategy, precision, mode)
        return
    if strategy == "fsdp2" and precision == "fp16-mixed":
        raise InvalidInputError(
            "precision='fp16-mixed' with strategy='fsdp2' is not estimated: FSDP2's mixed "
            "precision casts the parameters it all-gathers, and float16 then needs a gradient "
            "scaler over sharded gradients, which memfit does not run. Give 'bf16-mixed' (the "
            "same policy in bfloat16, no scaler) or 'fp16' (float16 parameters)."
        )
    if mode != "train" and strategy == "ddp":
        raise InvalidInputError(
            f"strategy={strategy!r} with mode='infer' would be ignored: DDP's buckets hold "
            "gradients, and inference has none. Drop strategy and world_size, or give "
            "strategy='fsdp2' to shard the parameters."
        )


def check_sharded_optimizer(strategy: str | None, optimizer: object) -> None:
    """An optimizer that cannot step FSDP2's shards is refused before any tracing."""
    name = str(optimizer) if isinstance(optimizer, str) else ""
    if strategy == "fsdp2" and name.endswith("-8bit"):
        raise InvalidInputError(
            f"optimizer={name!r} with strategy='fsdp2' is not estimated: bitsandbytes' 8-bit "
            "optimizers step plain tensors, and FSDP2's sharded parameters are DTensors, "
            "which bitsandbytes refuses (its update fails on the first step). Give "
            f"optimizer='{name.removesuffix('-8bit')}' (or its fused variant), or DDP, whose "
            "parameters are plain tensors."
        )


def check_offload_shards(offload: object, strategy: str | None, optimizer: object) -> None:
    """``offload_shards`` is a bool, given with FSDP2 and an optimizer that can step on the
    host."""
    if not isinstance(offload, bool):
        raise InvalidInputError(
            f"offload_shards={offload!r} is not True or False: give True to keep each rank's "
            "shards of the parameters, gradients and optimizer states in host memory "
            "(FSDP2's CPUOffloadPolicy), or False."
        )
    if not offload:
        return
    if strategy != "fsdp2":
        raise InvalidInputError(
            f"offload_shards=True with strategy={strategy!r} would be ignored: it is FSDP2's "
            "CPU offload policy. Give strategy='fsdp2' (and world_size=N), or drop "
            "offload_shards"
            + (" (DeepSpeed's own offload is not estimated yet)." if strategy in ZERO else ".")
        )
    name = str(optimizer) if isinstance(optimizer, str) else ""
    if name.endswith("-8bit") or in_backward(name):
        raise InvalidInputError(
            f"offload_shards=True with optimizer={name!r} is not estimated: with its shards "
            "offloaded FSDP2 steps the optimizer on the host, where "
            + (
                "bitsandbytes' 8-bit optimizers do not run"
                if name.endswith("-8bit")
                else "a step in backward would run inside the GPU's backward pass"
            )
            + ". Give optimizer='adamw' (or another that steps after backward), or drop "
            "offload_shards."
        )


def check_parallelize(fn: object, strategy: str | None) -> None:
    """``parallelize`` is a function of (model, mesh), given with the strategy it stands for."""
    if fn is None:
        return
    if not callable(fn):
        raise InvalidInputError(
            f"parallelize={fn!r} is not callable: give a function fn(model, mesh) -> model "
            "that wraps the model as your job does (DDP(model) or fully_shard calls)."
        )
    if strategy in ZERO:
        raise InvalidInputError(
            f"parallelize= with strategy={strategy!r} would be ignored: DeepSpeed wraps the "
            "model itself (deepspeed.initialize). Drop parallelize, or give strategy='fsdp2' "
            "or 'ddp' for wrapping of your own."
        )
    if strategy is None:
        raise InvalidInputError(
            "parallelize= without a strategy would be ignored: give strategy='fsdp2' (or "
            "'ddp') and world_size=N with it, the strategy your function applies."
        )


@contextmanager
def parallel_group(
    strategy: str | None, world_size: int, device_type: str, rank: int = 0
) -> Iterator[MetaStreams | None]:
    """The process group a step of ``strategy`` needs, for as long as it runs: on the meta
    device a fake one of ``world_size`` ranks; on a GPU, where none is set up, one rank of NCCL
    (a measurement runs one process). An existing group is used as it is. FSDP2 on the meta
    device runs with stand-in streams, and so does DeepSpeed's ZeRO: this yields them (else
    None)."""

    if strategy in ZERO and device_type == "meta":
        streams = MetaStreams()
        with (
            _group(strategy, world_size, device_type, rank),
            meta_accelerator(rank, world_size, streams),
        ):
            yield streams
        return
    if strategy == "fsdp2" and device_type == "meta":
        streams = MetaStreams()
        with _group(strategy, world_size, device_type, rank), meta_fsdp(streams):
            yield streams
        return
    with _group(strategy, world_size, device_type, rank):
        yield None


@contextmanager
def _group(strategy: str | None, world_size: int, device_type: str, rank: int) -> Iterator[None]:
    import torch.distributed as dist

    if strategy is None or (dist.is_available() and dist.is_initialized()):
        yield
        return
    if not dist.is_available():
        raise InvalidInputError(
            "This torch has no torch.distributed; DDP cannot be built. Install a torch build "
            "with distributed support (the PyPI wheels have it)."
        )
    launcher: dict[str, str] = {}
    if device_type == "meta" or world_size > 1:  # on a GPU: rank 0 alone, the others faked
        from torch.testing._internal.distributed.fake_pg import FakeStore

        if device_type != "meta":
            _check_fake_rank(strategy, world_size)
            # what a launcher sets, which DeepSpeed reads
            launcher = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": str(world_size)}
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    else:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29531")
        dist.init_process_group("nccl", rank=0, world_size=1)
    before = {name: os.environ.get(name) for name in launcher}
    os.environ.update(launcher)
    try:
        yield
    finally:
        dist.destroy_process_group()
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


FAKE_RANK_NOTE = (
    "rank 0 of {world_size} measured on this one GPU, the other ranks' collectives answered by "
    "PyTorch's fake process group: what rank 0 allocates, without NCCL's own memory (the "
    "estimate's non-PyTorch memory counts it) and without the other GPUs"
)


def _check_fake_rank(strategy: str, world_size: int) -> None:
    """A DDP rank is the same at any world size but for NCCL's memory: one NCCL rank shows it
    all, and DDP's all-reduce hook gets nothing back from a fake group on a GPU."""
    if strategy == "ddp":
        raise InvalidInputError(
            f"world_size={world_size} with strategy='ddp' is validated as one rank: a DDP rank "
            "holds the same model, gradients and buckets at any world size, and only NCCL's "
            "own memory grows with it. Validate with world_size=1 (one NCCL rank), or run the "
            "job under torchrun and validate in each rank."
        )


def parallel_note(strategy: str, world_size: int, own: bool = False, offload: bool = False) -> str:
    """What a data-parallel estimate assumed, for its notes (``own``: the model was wrapped
    by the user's ``parallelize``, not by memfit's default; ``offload``: FSDP2's shards on the
    host)."""
    ranks = f"{world_size} rank{'s' if world_size > 1 else ''}"
    nccl = (
        "NCCL's own device memory counted as one rank's on an H200 (490 MiB; more ranks take "
        "more, not measured yet)"
    )
    if own:
        return (
            f"{'FSDP2' if strategy == 'fsdp2' else 'DDP'} on {ranks}, the model wrapped by "
            "your parallelize function as it is: what each rank holds is what your "
            "fully_shard or DDP calls make it (a 2-D mesh of yours shards over its shard "
            "dimension only, as HSDP does; rank 0 traced on a fake process group); " + nccl
        )
    if strategy in ZERO:
        return (
            f"DeepSpeed ZeRO-{strategy[-1]} on {ranks}: DeepSpeed's engine over memfit's "
            "optimizer, with DeepSpeed's defaults but the stage (its gradient buckets of "
            "reduce_bucket_size elements included); each rank holds 1/"
            f"{world_size} of the float32 master weights and optimizer states"
            + {
                "zero1": "",
                "zero2": " and of the gradients",
                "zero3": ", of the gradients and of the parameters (gathered a module at a time)",
            }[strategy]
            + " (rank 0 traced on a fake process group with a meta-device accelerator and "
            "stand-in streams; measured on an H200 with DeepSpeed 0.19.8, rank 0 of 1 to 16 "
            "on a fake group: within 0.03% allocated, reserved within 0.2% but for one ZeRO-2 "
            "step 8.9% low, where the GPU's segments landed otherwise); " + nccl
        )
    if strategy == "fsdp2":
        return (
            f"FSDP2 on {ranks}: fully_shard on each block the model names in "
            "_no_split_modules (else its repeated blocks), then on the root, with FSDP2's "
            + ("defaults but its CPU offload policy" if offload else "defaults")
            + f"; every rank holds 1/{world_size} of the parameters, gradients and "
            + (
                "optimizer states (on the host), all-gathers"
                if offload
                else "optimizer states, all-gathers"
            )
            + " a block's parameters to run it, and runs this step "
            "on its own batch (rank 0 traced on a fake process group; the model is built on "
            "the host, as with torchtitan's meta-device init, so no rank holds it whole); "
            "mixed precision, if asked, is FSDP2's policy as torchtitan sets it (parameters "
            "all-gathered in the low precision, gradients reduced in float32, no autocast, "
            "whose cache would hold a cast copy of every parameter through the forward); " + nccl
        )
    return (
        f"DDP on {ranks}: every rank runs this step on its own batch and holds the whole model "
        "and its gradient buckets (rank 0 traced on a fake process group); " + nccl
    )


def parallelize(
    model: nn.Module,
    strategy: str,
    device_type: str,
    mixed: torch.dtype | None = None,
    fn: Callable[[nn.Module, Any], nn.Module] | None = None,
    offload: bool = False,
) -> nn.Module:
    """``model`` wrapped as ``strategy`` does (DDP with its defaults, FSDP2 as ``shard_model``,
    in ``mixed`` precision by its policy, its shards on the host with ``offload``), or by the
    user's ``fn(model, mesh)``; on the meta device the fake group's all-reduce is answered with
    the bucket, as NCCL's in-place one leaves it."""
    from torch.nn.parallel import DistributedDataParallel

    if fn is not None:
        wrapped = fn(model, _mesh(device_type))
        check_wrapped(wrapped, strategy, mixed, offload)
        if isinstance(wrapped, DistributedDataParallel) and device_type == "meta":
            _answer_in_place(wrapped)
        return wrapped
    if strategy == "fsdp2":
        return shard_model(model, _mesh(device_type), mixed, offload)
    if strategy in ZERO:  # DeepSpeed wraps model and optimizer together (optimizer_for)
        return model

    if device_type == "meta":
        ddp = DistributedDataParallel(model)
        _answer_in_place(ddp)
        return ddp
    index = torch.cuda.current_device()
    return DistributedDataParallel(model, device_ids=[index])


def _answer_in_place(ddp: Any) -> None:
    """On the meta device: DDP's all-reduce answered with the bucket, its timing off."""
    import torch.distributed as dist

    # DDP reads the hook's annotations as objects; this module's are strings
    _in_place.__annotations__ = {
        "bucket": dist.GradBucket,  # type: ignore[attr-defined]
        "return": torch.futures.Future[torch.Tensor],
    }
    stash = _FirstBuckets()  # with bucket views or without: measured both ways (2026-12-03)
    ddp.register_comm_hook(stash, _in_place)
    ddp.register_forward_pre_hook(stash.forward_started)
    # its timing statistics are CPU's or CUDA's only: on meta it warns from C++, on stderr
    ddp.logger = _NoRuntimeStats(ddp.logger)


def _mesh(device_type: str) -> Any:
    """A one-dimensional mesh of every rank of the default group, on ``device_type``."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    return DeviceMesh(device_type, list(range(dist.get_world_size())))


class _NoRuntimeStats:
    """DDP's logger without the per-iteration timing statistics, which a meta run cannot time."""

    def __init__(self, logger: Any) -> None:
        self._logger = logger

    def set_runtime_stats_and_log(self) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._logger, name)


class _FirstBuckets:
    """The first all-reduced buckets, held as NCCL holds them when the gradients are views of
    the buckets (``gradient_as_bucket_view=True``).

    DDP replaces its buckets at the second forward (ordered as the first backward readied the
    gradients); NCCL's process group still holds the first ones in its work objects until its
    watchdog thread lets them go. Measured on an H200 (GPT-2 fp32 4 x 512, one rank, steps back
    to back): the second step peaked a bucket set (498 MB) above the third, and a 1 s pause
    between steps took the difference away; without bucket views the old buckets went at the
    rebuild. So the trace holds them until the second forward after they were all-reduced:
    through the second step, the unsafe case's peak. The same step without bucket views was
    measured at that peak too on 2026-12-03 (6.124 GB), against 5.626 on 2026-12-02 when the
    old buckets went at the rebuild (benchmarks/results/2026-12-03-h200-held-batch-plans,
    2026-12-02-h200-offloaded-inputs-ddp-views): when NCCL lets them go is the watchdog's
    timing, so the trace holds them with or without bucket views, the higher of the two."""

    def __init__(self) -> None:
        self.held: list[torch.Tensor] = []
        self.forwards = -1  # forwards since the first all-reduce (-1: none yet)

    def keep(self, buffer: torch.Tensor) -> None:
        if self.forwards <= 0:
            self.forwards = 0
            self.held.append(buffer)

    def forward_started(self, module: Any, args: Any) -> None:
        if self.forwards >= 0:
            self.forwards += 1
            if self.forwards >= 2:
                self.held.clear()


def _in_place(state: Any, bucket: Any) -> torch.futures.Future[torch.Tensor]:
    if isinstance(state, _FirstBuckets):
        state.keep(bucket.buffer())
    done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    done.set_result(bucket.buffer())
    return done
