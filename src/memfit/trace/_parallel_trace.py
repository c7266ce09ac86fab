"""What a trace does for a data-parallel rank (``memfit.technique.data_parallel``): FSDP2's
streams, storage resizes and DTensor shards told to the recorder, the model built off the GPU,
and what the notes say of the rank."""

from __future__ import annotations

from contextlib import AbstractContextManager, ExitStack
from typing import Any

from torch import nn

from memfit._events import Category
from memfit._units import format_bytes
from memfit.technique.data_parallel import (
    ZERO,
    MetaStreams,
    host_stepping,
    offloaded_shards,
    parallel_note,
    propagation_hidden,
    shards_offloaded,
    storage_hooks,
)
from memfit.trace._recorder import Recorder
from memfit.workload import Workload

__all__ = [
    "BUCKET_VIEW_NOTE",
    "claim_buffers",
    "offloaded_optimizer",
    "rank_notes",
    "sharded_build",
    "shards_note",
    "uneven_shards",
]

BUCKET_VIEW_NOTE = (
    "DDP: the first step's gradient buckets are held through the second (DDP replaces them at "
    "the second forward, and NCCL lets the old ones go only when its watchdog thread cleans up: "
    "measured on an H200, GPT-2 fp32 4 x 512 with gradient_as_bucket_view=True peaked at 6.125 "
    "GB in the second step and 5.627 in the third, 5.627 in both with a 1 s pause between "
    "steps; without bucket views at 5.622 in one run and 6.124 in another); in a loop that "
    "pauses, or where the watchdog is quick, the second step peaks up to a gradients' size lower"
)


def sharded_build(
    workload: Workload, streams: MetaStreams | None, recorder: Recorder, stack: ExitStack
) -> AbstractContextManager[Any] | None:
    """The recorder told of the stand-in streams (FSDP2, ZeRO), and for FSDP2 of its storage
    resizes and its DTensors for as long as ``stack`` lasts; returns the context the model is
    built in (FSDP2: off the GPU). None otherwise."""
    if streams is None:
        return None
    recorder.stream_of = streams.current
    if workload.strategy != "fsdp2":
        return None
    from torch.distributed.tensor import DTensor

    recorder.pass_through = (DTensor,)
    stack.enter_context(storage_hooks(recorder.storage_allocated, recorder.storage_freed))
    stack.enter_context(propagation_hidden(recorder.paused))
    stack.enter_context(offloaded_shards(recorder.host))
    return recorder.host()


def claim_buffers(
    workload: Workload, streams: MetaStreams | None, recorder: Recorder, model: nn.Module
) -> None:
    """FSDP2 moves the buffers of a model built off the GPU to it whole."""
    if streams is not None and workload.strategy == "fsdp2":
        for buffer in model.buffers():
            recorder.claim(buffer, Category.BUFFER, "fsdp.buffer")


def offloaded_optimizer(
    workload: Workload, recorder: Recorder, model: nn.Module, optimizer: Any
) -> bool:
    """With every FSDP2 shard on the host (CPU offload), the optimizer steps there: its steps
    run off the GPU from now on. Returns whether they do."""
    if workload.strategy != "fsdp2" or optimizer is None or not shards_offloaded(model):
        return False
    host_stepping(optimizer, recorder.host)
    return True


def shards_note(params: int, grads: int, states: int) -> str:
    """What a rank whose FSDP2 shards are offloaded holds on the host (:func:`host_bytes`), for
    the notes."""
    return (
        "FSDP2's CPU offload: this rank's shards wait in host memory, "
        f"{format_bytes(params + grads + states)} of it ({format_bytes(params)} of parameters "
        f"and {format_bytes(grads)} of gradients pinned, {format_bytes(states)} of optimizer "
        "states), none of it on the GPU; each all-gather first copies a module's shards to the "
        "GPU, each reduce-scatter's gradient shards are copied back, and the optimizer steps "
        "on the host (its time is not in the step-time model)"
    )


def uneven_shards(workload: Workload, parameters: list[Any]) -> bool:
    """Whether the last rank may allocate otherwise than rank 0: ZeRO pads its flat buffer for
    the last partition; FSDP2 when a parameter's dim 0 does not split evenly."""
    if workload.strategy in ZERO:
        return True
    return workload.strategy == "fsdp2" and any(
        p.dim() > 0 and p.shape[0] % workload.world_size for p in parameters
    )


def rank_notes(workload: Workload) -> list[str]:
    """What the estimate of a data-parallel rank assumed."""
    if workload.strategy is None:
        return []
    own = workload.parallelize is not None
    notes = [parallel_note(workload.strategy, workload.world_size, own, workload.offload_shards)]
    if workload.strategy == "ddp":  # its first buckets held through the second step
        notes.append(BUCKET_VIEW_NOTE)
    return notes
