"""DeepSpeed ZeRO stages 1 to 3 (``strategy="zero1" | "zero2" | "zero3"``): DeepSpeed's engine.

As with FSDP2, a trace runs the library itself: ``deepspeed.initialize`` wraps the model and
the optimizer memfit builds, and its ZeRO optimizer flattens the parameters' float32 copies
into one buffer, keeps this rank's partition and the optimizer states of that partition only,
(stage 2) reduces and partitions the gradients as backward makes them, and (stage 3)
partitions the parameters too, gathering a module's as it runs. On the meta device
DeepSpeed is given a stand-in accelerator whose device is ``meta`` (it otherwise moves the model
to the CPU it found), and the process group is PyTorch's fake one, as for DDP and FSDP2.

The step goes through the engine, as DeepSpeed requires: ``engine.backward(loss)`` after each
micro-batch, ``engine.step()`` after each too (it steps the optimizer at the last one).

Precision is DeepSpeed's: ``fp32``, or ``bf16-mixed`` as its ``bf16`` setting (bfloat16
parameters and gradients, float32 master partitions in the optimizer). Two of ZeRO-3's helpers
need data and are replaced while a trace runs (``_swap_stage3``): its defragmentation, which
copies through host memory, and its checks that every rank sees the same parameter ids.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import torch
from torch import nn

from memfit._errors import InvalidInputError, MissingExtraError
from memfit._patching import patched
from memfit.technique.data_parallel._fsdp import MetaStreams

__all__ = ["ZERO", "check_zero", "engage_zero", "meta_accelerator", "zero_config"]

ZERO = ("zero1", "zero2", "zero3")


def check_zero(strategy: str, precision: str, mode: str) -> None:
    """A ZeRO stage memfit runs: DeepSpeed installed, training, fp32 or bf16-mixed."""
    # DeepSpeed warns as it loads that it found no GPU (on a CPU): its records held back
    logging.disable(logging.WARNING)
    try:
        # DeepSpeed imports, as it runs, a module that calls torch.compile as it loads (its
        # Muon optimizer's): loaded here, before a trace, which refuses compiles it did not
        # expect
        import deepspeed.runtime.engine
        import deepspeed.runtime.zero.stage3
        import deepspeed.runtime.zero.stage_1_and_2

        with contextlib.suppress(ImportError):  # imported by the optimizer step, if present
            import deepspeed.runtime.zero.muon.original_muon  # noqa: F401
    except ImportError:
        raise MissingExtraError(
            "deepspeed", f"strategy={strategy!r} (DeepSpeed's own ZeRO engine)", "zero"
        ) from None
    finally:
        logging.disable(logging.NOTSET)
    if mode != "train":
        raise InvalidInputError(
            f"strategy={strategy!r} with mode='infer' would be ignored: ZeRO partitions "
            "optimizer states and gradients, which inference has none of."
        )
    if precision not in ("fp32", "bf16-mixed"):
        raise InvalidInputError(
            f"precision={precision!r} with strategy={strategy!r} is not estimated: give "
            "'fp32' or 'bf16-mixed' (DeepSpeed's bf16: bfloat16 parameters and gradients, "
            "float32 master partitions in the optimizer)."
        )


def zero_config(
    strategy: str, precision: str, micro_batch: int, accumulation: int
) -> dict[str, Any]:
    """The DeepSpeed configuration of ``strategy``: ZeRO's stage, DeepSpeed's defaults else."""
    return {
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": accumulation,
        "zero_optimization": {"stage": ZERO.index(strategy) + 1},
        "bf16": {"enabled": precision == "bf16-mixed"},
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }


def engage_zero(
    model: nn.Module, optimizer: torch.optim.Optimizer, config: dict[str, Any]
) -> tuple[Any, Any]:
    """The DeepSpeed engine over ``model`` and its ZeRO optimizer over ``optimizer``."""
    import deepspeed

    engine, zero, _, _ = deepspeed.initialize(
        model=model, optimizer=optimizer, config=config, dist_init_required=False
    )
    return engine, zero


@contextmanager
def meta_accelerator(
    rank: int, world_size: int, streams: MetaStreams | None = None
) -> Iterator[None]:
    """DeepSpeed's accelerator is one whose device is ``meta`` while this lasts, and the
    environment says which rank this is, as torchrun's would (DeepSpeed asserts it). With
    ``streams``, its streams are those stand-ins, as a GPU's are streams (ZeRO-3 gathers
    parameters and reduces gradients on streams of their own, whose memory the allocator keeps
    apart); tensors' ``record_stream`` on them does nothing."""
    from deepspeed.accelerator import real_accelerator
    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

    class _Meta(CPU_Accelerator):  # type: ignore[misc]
        """The CPU accelerator, its device the meta device (nothing pinned, no streams)."""

        def device_name(self, device_index: int | None = None) -> str:
            return "meta"

        def current_device_name(self) -> str:
            return "meta"

        def device(self, device_index: int | None = None) -> torch.device:
            return torch.device("meta")

        def on_accelerator(self, tensor: torch.Tensor) -> bool:
            return tensor.device.type == "meta"

        def empty_cache(self) -> None:  # CUDA's: the trace records it (the CPU's does nothing)
            torch.cuda.empty_cache()

        def pin_memory(self, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            return tensor

        def is_synchronized_device(self) -> bool:
            return streams is None

        def Stream(self, *args: Any, **kwargs: Any) -> Any:
            return None if streams is None else streams.handle.Stream()

        def stream(self, stream: Any) -> Any:
            return contextlib.nullcontext() if streams is None else streams.handle.stream(stream)

        def current_stream(self, device_index: int | None = None) -> Any:
            return None if streams is None else streams.handle.current_stream()

        def default_stream(self, device_index: int | None = None) -> Any:
            return None if streams is None else streams.handle.default_stream()

        def Event(self, *args: Any, **kwargs: Any) -> Any:
            return None if streams is None else streams.handle.Event()

        def create_op_builder(self, class_name: str) -> Any:
            # no shared-memory or oneCCL collectives (built from C++ at first use): the fake
            # process group answers them
            if class_name in ("ShareMemCommBuilder", "CCLCommBuilder"):
                return None
            return super().create_op_builder(class_name)

    ranks = {"RANK": str(rank), "LOCAL_RANK": "0", "WORLD_SIZE": str(world_size)}
    _forget_groups()
    # ZeRO-3 puts its own torch.nn.functional.linear in place for good (its memory-efficient
    # linear): right for the job that runs it, wrong for whatever is traced after it here (a
    # ZeRO-2 trace after a ZeRO-3 one ordered its backward's products otherwise: -8.9%)
    linear = torch.nn.functional.linear
    try:
        with (
            patched(
                [
                    (real_accelerator, "ds_accelerator", _Meta()),
                    *_stage3_stand_ins(),
                    *_shape_stand_ins(),
                    (torch.Tensor, "record_stream", _record_stream_of(torch.Tensor.record_stream)),
                ]
            ),
            mock.patch.dict(os.environ, ranks),
        ):
            yield
    finally:
        torch.nn.functional.linear = linear
        _forget_groups()


_STAGE3 = (
    "deepspeed.runtime.zero.stage3",
    "deepspeed.runtime.zero.partition_parameters",
    "deepspeed.runtime.zero.partitioned_param_coordinator",
    "deepspeed.runtime.zero.utils",
)


def _stage3_stand_ins() -> list[tuple[Any, str, Any]]:
    """ZeRO-3's helpers that need data, with what stands in for them during a trace.
    ``defragment`` copies through host memory (``_defragment_on_meta``); the checks that every
    rank sees the same parameter ids broadcast them and read them back, which a fake process
    group cannot answer (and a trace of one rank's view cannot disagree with itself)."""
    stand_ins = {"defragment": _defragment_on_meta, "assert_ints_same_as_other_ranks": _agreed}
    return [
        (module, attr, value)
        for module in filter(None, map(sys.modules.get, _STAGE3))
        for attr, value in stand_ins.items()
        if hasattr(module, attr)
    ]


class _ShapesTakeNoMemory:
    """``torch`` as ZeRO-1/2's optimizer module sees it during a trace, but for one call: the
    meta tensors it makes only to keep each parameter's shape (``zeros_like(p,
    device="meta")``) take no storage. On a GPU they are free; in a trace, whose GPU is the
    meta device, they would count as a second copy of the model (measured on an H200: 478 MiB
    too many for GPT-2)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def zeros_like(t: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if str(kwargs.get("device")) != "meta":
            return torch.zeros_like(t, *args, **kwargs)
        empty = torch.empty(0, dtype=kwargs.get("dtype") or t.dtype, device="meta")
        return empty.as_strided(t.shape, (0,) * t.dim())


def _record_stream_of(original: Any) -> Any:
    def record_stream(self: torch.Tensor, stream: Any) -> None:
        if isinstance(stream, torch.Stream):
            original(self, stream)

    return record_stream


def _shape_stand_ins() -> list[tuple[Any, str, Any]]:
    module = sys.modules.get("deepspeed.runtime.zero.stage_1_and_2")
    return [] if module is None else [(module, "torch", _ShapesTakeNoMemory())]


def _agreed(ints: list[int]) -> None:
    return None


def _defragment_on_meta(tensors: list[torch.Tensor]) -> torch.Tensor:
    """ZeRO-3's ``defragment`` as the GPU sees it: each tensor freed as it is copied to a host
    buffer, then one flat device buffer made and the tensors pointed into it. The host copy
    has no data on the meta device, and it is not GPU memory, so it is skipped."""
    total = sum(t.numel() for t in tensors)
    dtype, device = tensors[0].dtype, tensors[0].device
    places = []
    offset = 0
    for t in tensors:
        places.append((t, offset, t.numel()))
        offset += t.numel()
        t.data = torch.empty(0, dtype=dtype, device=device)
    flat = torch.empty(total, dtype=dtype, device=device)
    for t, start, numel in places:
        t.data = flat.narrow(0, start, numel)
    return flat


def _forget_groups() -> None:
    """DeepSpeed's process groups and communication backend, cached in its modules, dropped:
    each trace sets up a fake process group of its own and tears it down after."""
    import deepspeed.comm.comm as comm
    import torch.distributed as dist
    from deepspeed.utils import groups

    comm.cdb = None
    for name, value in list(vars(groups).items()):
        if not (name.startswith("_") and name.isupper()):
            continue
        if isinstance(value, dict):
            setattr(groups, name, {})
        elif isinstance(value, dist.ProcessGroup):
            setattr(groups, name, None)
