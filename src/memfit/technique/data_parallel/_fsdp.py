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

FSDP2's CPU offload (``CPUOffloadPolicy``) keeps each rank's shards of the parameters, the
gradients and the optimizer states in host memory: ``offloaded_shards`` makes the trace see
that (``offload_shards`` is memfit's option for it).

The default wrapping is what torchtitan and Hugging Face's FSDP2 path do: ``fully_shard`` on
every module whose class the model names in ``_no_split_modules`` (innermost first), then on the
root; a model that names none has its repeated blocks (``find_blocks``) sharded. A module that
holds a parameter tied to another module's is left to the root's group.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from types import ModuleType, SimpleNamespace
from typing import Any

import torch
from torch import nn

from memfit._errors import InvalidInputError
from memfit._patching import patched
from memfit.technique.checkpointing import find_blocks

__all__ = [
    "MetaStreams",
    "check_wrapped",
    "host_bytes",
    "host_stepping",
    "meta_fsdp",
    "offloaded_shards",
    "propagation_hidden",
    "shard_model",
    "shards_offloaded",
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
    # sharded parameters stay on the meta device: that is what is traced (and where FSDP2
    # offloads them, on the host: ``offloaded_shards``)
    pairs.append((FSDPParamGroup, "_validate_no_meta_params", lambda self: None))
    pairs.append((FSDPParamGroup, "_validate_cpu_offload_params", lambda self: None))
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
def offloaded_shards(host: Callable[[], AbstractContextManager[Any]]) -> Iterator[None]:
    """FSDP2's CPU offload on the meta device, where ``host`` makes tensors that are not on the
    GPU. A GPU run keeps an offloaded parameter's shard in pinned host memory, copies it to the
    GPU for each all-gather (the copy lives until the all-gather's input is built), and copies
    each reduce-scattered gradient shard back to the host; the optimizer then steps on the host
    (``host_stepping``). On the meta device none of those copies happen by themselves (the shard
    is already "on" the device, and a meta tensor cannot be copied to the host), so here: the
    shards are made inside ``host``, each all-gather's input is a fresh copy of the shard, and a
    new gradient shard is replaced by one made inside ``host`` once the reduction has built it,
    after which the GPU's reduce-scatter output goes as it does on a GPU."""
    from torch.distributed.fsdp._fully_shard import _fsdp_param, _fsdp_param_group

    param_class = _fsdp_param.FSDPParam
    init = param_class._init_sharded_param
    inputs: Any = param_class.all_gather_inputs  # a property
    reduce = getattr(_fsdp_param_group, "foreach_reduce")  # noqa: B009 (not exported)
    sharded = _fsdp_param.ShardedState.SHARDED

    def init_sharded(self: Any, *args: Any, **kwargs: Any) -> None:
        with host() if self.offload_to_cpu else nullcontext():
            init(self, *args, **kwargs)

    def gather_inputs(self: Any) -> list[torch.Tensor]:
        if not (self.offload_to_cpu and self.sharded_state == sharded):
            return inputs.fget(self)  # type: ignore[no-any-return]
        kept = self._sharded_param_data
        self._sharded_param_data = kept.clone()  # the shard's copy to the GPU
        try:
            return inputs.fget(self)  # type: ignore[no-any-return]
        finally:
            self._sharded_param_data = kept

    def reduce_to_host(fsdp_params: list[Any], *args: Any, **kwargs: Any) -> Any:
        offloaded = [p for p in fsdp_params if p.offload_to_cpu]
        before = {id(p): p.sharded_param.grad for p in offloaded}
        for p in offloaded:  # no copy to the host, which a meta tensor cannot make
            p.offload_to_cpu = False
        try:
            out = reduce(fsdp_params, *args, **kwargs)
        finally:
            for p in offloaded:
                p.offload_to_cpu = True
        for p in offloaded:
            grad = p.sharded_param.grad
            if grad is not None and grad is not before[id(p)]:  # a new gradient: the host's
                with host():
                    local = torch.empty_like(grad._local_tensor)
                p.sharded_param.grad = p.to_sharded_dtensor(local)
        return out

    with patched(
        [
            (param_class, "_init_sharded_param", init_sharded),
            (param_class, "all_gather_inputs", property(gather_inputs)),
            (_fsdp_param_group, "foreach_reduce", reduce_to_host),
        ]
    ):
        yield


def _groups(model: nn.Module) -> list[Any]:
    """The parameter groups of the modules ``fully_shard`` was applied to in ``model``."""
    from torch.distributed.fsdp import FSDPModule

    found = (_fsdp_group(m) for m in model.modules() if isinstance(m, FSDPModule))
    return [g for g in found if g is not None]


def shards_offloaded(model: nn.Module) -> bool | None:
    """Whether FSDP2 offloads ``model``'s shards to the host: True for every group, False for
    none (or no FSDP2), None for some but not all."""
    params = [p for g in _groups(model) for p in g.fsdp_params]
    flags = {bool(getattr(p, "offload_to_cpu", False)) for p in params}
    if len(flags) > 1:
        return None
    return flags == {True}


def host_stepping(optimizer: Any, host: Callable[[], AbstractContextManager[Any]]) -> None:
    """``optimizer.step`` runs inside ``host`` from now on: with every shard on the host, FSDP2's
    CPU offload steps the optimizer there, its states and temporaries in host memory."""
    for one in optimizer if isinstance(optimizer, (list, tuple)) else [optimizer]:
        step = one.step

        def on_host(*args: Any, _step: Any = step, **kwargs: Any) -> Any:
            with host():
                return _step(*args, **kwargs)

        one.step = on_host


def host_bytes(model: nn.Module, optimizer: Any) -> tuple[int, int, int]:
    """What a rank whose shards FSDP2 offloads holds in host memory: the shards of the
    parameters and of their gradients (both pinned), and the optimizer's states."""
    params = grads = states = 0
    for group in _groups(model):
        for p in group.fsdp_params:
            data = p._sharded_param_data
            params += data.numel() * data.element_size()
            grads += data.numel() * data.element_size() if p.sharded_param.requires_grad else 0
    for one in optimizer if isinstance(optimizer, (list, tuple)) else [optimizer]:
        for state in getattr(one, "state", {}).values():
            for t in state.values():
                if isinstance(t, torch.Tensor) and t.dim() > 0:
                    local = getattr(t, "_local_tensor", t)
                    states += local.numel() * local.element_size()
    return params, grads, states


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


def shard_model(
    model: nn.Module, mesh: Any, mixed: torch.dtype | None = None, offload: bool = False
) -> nn.Module:
    """``fully_shard`` as torchtitan and Hugging Face apply it: each module of a class in
    ``_no_split_modules``, innermost first, else the repeated blocks; then the root. With
    ``mixed``, torchtitan's mixed precision: parameters all-gathered in ``mixed``, gradients
    reduced in float32 (no autocast: the step runs in ``mixed`` as the parameters are). With
    ``offload``, FSDP2's ``CPUOffloadPolicy`` on every group (torchtitan's ``cpu_offload``)."""
    from torch.distributed.fsdp import (
        CPUOffloadPolicy,
        MixedPrecisionPolicy,
        OffloadPolicy,
        fully_shard,
    )

    policy = MixedPrecisionPolicy(
        param_dtype=mixed, reduce_dtype=torch.float32 if mixed is not None else None
    )
    where = CPUOffloadPolicy() if offload else OffloadPolicy()

    wanted = set(getattr(model, "_no_split_modules", None) or ())
    named = [m for m in model.modules() if m is not model and type(m).__name__ in wanted]
    blocks = named or find_blocks(model)
    tied = _tied_parameters(model)
    for block in reversed(blocks) if named else blocks:
        # a module holding a parameter tied to one outside it (BERT's word embeddings, tied to
        # its language-model head) is left to the root's group: FSDP2 refuses to split them
        if not any(id(p) in tied for p in block.parameters()):
            fully_shard(block, mesh=mesh, mp_policy=policy, offload_policy=where)
    fully_shard(model, mesh=mesh, mp_policy=policy, offload_policy=where)
    return model


def _tied_parameters(model: nn.Module) -> set[int]:
    """The parameters that more than one module holds."""
    holders: dict[int, int] = {}
    for module in model.modules():
        for p in module.parameters(recurse=False):
            holders[id(p)] = holders.get(id(p), 0) + 1
    return {key for key, count in holders.items() if count > 1}


def check_wrapped(
    model: object, strategy: str, mixed: torch.dtype | None, offload: bool = False
) -> None:
    """What a user's ``parallelize`` returned is the strategy it was given for, with nothing
    memfit would estimate wrongly: FSDP2 modules for ``fsdp2`` (all or none of them offloading
    to the CPU, as ``offload`` says), in the mixed precision asked for."""
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
    groups = _groups(model)
    offloaded = shards_offloaded(model)
    if offloaded is None:
        raise InvalidInputError(
            "parallelize applied FSDP2's CPU offload policy to some modules and not to others, "
            "which memfit does not estimate (the optimizer steps on the host only when every "
            "shard is there): pass offload_policy=CPUOffloadPolicy() to every fully_shard call, "
            "or to none."
        )
    if offload and not offloaded:
        raise InvalidInputError(
            "offload_shards=True, and parallelize applied FSDP2 without a CPU offload policy: "
            "the shards would be estimated on the host where your job keeps them on the GPU. "
            "Pass offload_policy=CPUOffloadPolicy() to your fully_shard calls, or drop "
            "offload_shards (a wrapping of yours that offloads is read as it is)."
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
