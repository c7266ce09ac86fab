"""FSDP2 (``fully_shard``) on the meta device: PyTorch's own code, run with stand-in streams.

A trace runs FSDP2 itself, not a model of it, so its all-gather and reduce-scatter buffers,
their streams, prefetching and resharding are what the installed torch does. Two things FSDP2
needs are missing on the meta device, and this module stands in for them while a trace runs:

- **a device handle** (``torch.cuda`` on a GPU): streams, events and the current device. The
  stand-in's streams run nothing; they say which stream is current, so that each allocation
  lands in that stream's pool, as the caching allocator keeps one pool per stream;
- **FSDP2's check that no parameter is on the meta device**, which would refuse the trace.

FSDP2 frees and reallocates an unsharded parameter's memory by resizing its storage
(``alloc_storage`` / ``free_storage``), which no aten op shows: the trace is told through
``storage_hooks``. DTensor's sharding propagation makes meta tensors of global shapes, which are
not memory on a GPU: ``propagation_hidden`` keeps them out of the trace.

The default wrapping is what torchtitan and Hugging Face's FSDP2 path do: ``fully_shard`` on
every module whose class the model names in ``_no_split_modules`` (innermost first), then on the
root; a model that names none has its repeated blocks (``find_blocks``) sharded. A module that
holds a parameter tied to another module's is left to the root's group.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from types import ModuleType, SimpleNamespace
from typing import Any

import torch
from torch import nn

from memfit._errors import InvalidInputError
from memfit.workload._checkpoint import find_blocks
from memfit.workload._patching import patched

__all__ = [
    "MetaStreams",
    "check_wrapped",
    "meta_fsdp",
    "propagation_hidden",
    "shard_model",
    "storage_hooks",
]

_PACKAGE = "torch.distributed.fsdp._fully_shard"
_HANDLE_USERS = (
    "torch.distributed.device_mesh",
    "torch.distributed.tensor.device_mesh",
    "torch.distributed.tensor._random",
)


class _Event:
    """A stand-in CUDA event: recorded and waited on at once (meta ops run in order)."""

    def record(self, stream: Any = None) -> _Event:
        return self

    def wait(self, stream: Any = None) -> None:
        return None

    def synchronize(self) -> None:
        return None

    def query(self) -> bool:
        return True


class _Stream:
    """A stand-in CUDA stream, known by its number (0: the compute stream)."""

    def __init__(self, number: int) -> None:
        self.number = number

    def wait_stream(self, stream: Any) -> None:
        return None

    def wait_event(self, event: Any) -> None:
        return None

    def record_event(self, event: Any = None) -> _Event:
        return event if event is not None else _Event()

    def synchronize(self) -> None:
        return None


class MetaStreams:
    """The device handle FSDP2 is given on the meta device: its streams are numbered in the
    order FSDP2 makes them, and ``current`` says which one the code runs under."""

    def __init__(self) -> None:
        self._made = [_Stream(0)]
        self._current = self._made[0]
        self.handle = SimpleNamespace(
            Stream=self._new_stream,
            Event=lambda *args, **kwargs: _Event(),
            current_stream=lambda device=None: self._current,
            default_stream=lambda device=None: self._made[0],
            stream=self._use,
            current_device=lambda: 0,
            device_count=lambda: 1,
            synchronize=lambda device=None: None,
            is_available=lambda: True,
        )

    def current(self) -> int:
        """The number of the stream allocations are made on now."""
        return self._current.number

    def _new_stream(self, *args: Any, **kwargs: Any) -> _Stream:
        stream = _Stream(len(self._made))
        self._made.append(stream)
        return stream

    @contextmanager
    def _use(self, stream: _Stream | None) -> Iterator[None]:
        before = self._current
        self._current = stream if stream is not None else before
        try:
            yield
        finally:
            self._current = before


def _fsdp_modules() -> list[ModuleType]:
    """FSDP2's modules, and DTensor's and the device mesh's, which ask for the device handle
    too (DTensor's sharding propagation counts the devices per host)."""
    package = importlib.import_module(_PACKAGE)
    return [
        *(
            importlib.import_module(f"{_PACKAGE}.{info.name}")
            for info in pkgutil.iter_modules(package.__path__)
        ),
        *(importlib.import_module(name) for name in _HANDLE_USERS),
    ]


@contextmanager
def meta_fsdp(streams: MetaStreams) -> Iterator[None]:
    """FSDP2 runs on the meta device while this lasts, with ``streams`` as its device handle."""
    from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup

    def device_handle(device_type: str = "cuda", original: Any = None) -> Any:
        return streams.handle if device_type == "meta" else original(device_type)

    pairs: list[tuple[Any, str, Any]] = []
    for module in _fsdp_modules():
        original = getattr(module, "_get_device_handle", None)
        if original is not None:
            pairs.append(
                (module, "_get_device_handle", lambda t="cuda", o=original: device_handle(t, o))
            )
    # sharded parameters stay on the meta device: that is what is traced
    pairs.append((FSDPParamGroup, "_validate_no_meta_params", lambda self: None))
    with patched(pairs):
        yield


@contextmanager
def storage_hooks(
    allocated: Callable[[torch.Tensor], None], freed: Callable[[torch.Tensor], None]
) -> Iterator[None]:
    """Tell ``allocated`` and ``freed`` of each tensor whose storage FSDP2 resizes, after it
    grows and before it shrinks to nothing (an unsharded parameter's all-gather output)."""
    from torch.distributed.fsdp._fully_shard import _fsdp_param

    alloc_storage, free_storage = _fsdp_param.alloc_storage, _fsdp_param.free_storage

    def grow(tensor: torch.Tensor) -> None:
        alloc_storage(tensor)
        allocated(tensor)

    def shrink(tensor: torch.Tensor) -> None:
        if tensor.untyped_storage().size() != 0:
            freed(tensor)
        free_storage(tensor)

    pairs: list[tuple[Any, str, Any]] = []
    for module in _fsdp_modules():
        if getattr(module, "alloc_storage", None) is alloc_storage:
            pairs.append((module, "alloc_storage", grow))
        if getattr(module, "free_storage", None) is free_storage:
            pairs.append((module, "free_storage", shrink))
    with patched(pairs):
        yield


@contextmanager
def propagation_hidden(paused: Callable[[], AbstractContextManager[Any]]) -> Iterator[None]:
    """DTensor's sharding propagation runs inside ``paused``: it makes meta tensors of each
    operand's global shape to infer the result's, which a GPU makes on the meta device too
    (never allocated), but which a trace on the meta device would count (GPT-2's whole word
    embeddings, from an optimizer step on its shard)."""
    from torch.distributed.tensor._sharding_prop import ShardingPropagator

    def hidden(name: str) -> Any:
        method = getattr(ShardingPropagator, name)

        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            with paused():
                return method(self, *args, **kwargs)

        return run

    names = ("propagate_op_sharding_non_cached", "_propagate_tensor_meta_non_cached")
    with patched(
        [(ShardingPropagator, n, hidden(n)) for n in names if hasattr(ShardingPropagator, n)]
    ):
        yield


def shard_model(model: nn.Module, mesh: Any, mixed: torch.dtype | None = None) -> nn.Module:
    """``fully_shard`` as torchtitan and Hugging Face apply it: each module of a class in
    ``_no_split_modules``, innermost first, else the repeated blocks; then the root. With
    ``mixed``, torchtitan's mixed precision: parameters all-gathered in ``mixed``, gradients
    reduced in float32 (no autocast: the step runs in ``mixed`` as the parameters are)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(
        param_dtype=mixed, reduce_dtype=torch.float32 if mixed is not None else None
    )

    wanted = set(getattr(model, "_no_split_modules", None) or ())
    named = [m for m in model.modules() if m is not model and type(m).__name__ in wanted]
    blocks = named or find_blocks(model)
    tied = _tied_parameters(model)
    for block in reversed(blocks) if named else blocks:
        # a module holding a parameter tied to one outside it (BERT's word embeddings, tied to
        # its language-model head) is left to the root's group: FSDP2 refuses to split them
        if not any(id(p) in tied for p in block.parameters()):
            fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


def _tied_parameters(model: nn.Module) -> set[int]:
    """The parameters that more than one module holds."""
    holders: dict[int, int] = {}
    for module in model.modules():
        for p in module.parameters(recurse=False):
            holders[id(p)] = holders.get(id(p), 0) + 1
    return {key for key, count in holders.items() if count > 1}


def check_wrapped(model: object, strategy: str, mixed: torch.dtype | None) -> None:
    """What a user's ``parallelize`` returned is the strategy it was given for, with nothing
    memfit would estimate wrongly: FSDP2 modules for ``fsdp2`` (none offloading to the CPU),
    in the mixed precision asked for."""
    from torch.nn.parallel import DistributedDataParallel

    if not isinstance(model, nn.Module):
        raise InvalidInputError(
            f"parallelize returned {type(model).__name__}, not an nn.Module: return the model "
            "you wrapped (fully_shard returns it; DDP(model) is one)."
        )
    if strategy == "ddp":
        if not isinstance(model, DistributedDataParallel):
            raise InvalidInputError(
                "parallelize returned a model that is not DistributedDataParallel, with "
                "strategy='ddp': return DDP(model, ...) as your job builds it, or give the "
                "strategy your function applies."
            )
        return
    from torch.distributed.fsdp import FSDPModule

    sharded = [m for m in model.modules() if isinstance(m, FSDPModule)]
    if not sharded:
        raise InvalidInputError(
            "parallelize returned a model with no module fully_shard was applied to, with "
            "strategy='fsdp2': call fully_shard(module, mesh=mesh) on its blocks and root."
        )
    groups = [g for g in map(_fsdp_group, sharded) if g is not None]
    if any(getattr(p, "offload_to_cpu", False) for g in groups for p in g.fsdp_params):
        raise InvalidInputError(
            "parallelize applied FSDP2 with a CPU offload policy, which memfit does not "
            "estimate yet: its shards would be counted on the GPU. Estimate without "
            "offload_policy (an upper bound on the GPU's memory)."
        )
    policies = [getattr(g, "mp_policy", None) for g in groups]
    if (
        mixed is not None
        and groups
        and not any(getattr(p, "param_dtype", None) == mixed for p in policies)
    ):
        raise InvalidInputError(
            f"precision asks for {str(mixed).replace('torch.', '')} mixed precision, which "
            "under FSDP2 is its policy, and parallelize set none: pass mp_policy="
            f"MixedPrecisionPolicy(param_dtype=torch.{str(mixed).replace('torch.', '')}) to "
            "fully_shard, or give precision='fp32' if your job trains in float32."
        )


def _fsdp_group(module: Any) -> Any:
    """The parameter group of one ``fully_shard`` module (private to FSDP2: None where its
    layout differs, and the checks that read it pass)."""
    try:
        return module._get_fsdp_state()._fsdp_param_group
    except AttributeError:
        return None
