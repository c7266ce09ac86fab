"""Activation offload: what a block's forward saves for the backward waits in pinned host memory.

``offload=0.5`` (``memfit.offload_activations(model, 0.5)``) picks that share of the model's
repeated blocks, spread evenly as partial checkpointing spreads them (:func:`chosen_blocks`),
and runs each under ``torch.autograd.graph.saved_tensors_hooks``: every tensor the block's
forward saves (but parameters, tensors that are not dense, and small ones) is copied to pinned
host memory on a side stream, and its GPU memory is given back; the backward brings a block's
tensors back one block ahead of need, on the same side stream, so the copies run under the
neighbouring blocks' compute. What it costs is transfer time where the copies outlast that
compute; what it saves is every offloaded block's activations but two blocks' worth in flight.

Unlike ``torch.autograd.graph.save_on_cpu`` (synchronous copies to pageable memory: BERT-base's
step 3.3x slower on an H200), the copies here do not stall the host, and the memory they free
is freed at program points that do not depend on timing, so memfit's trace reproduces them and
the allocator emulator's peak is the GPU's:

* forward: block ``k``'s GPU tensors are let go at the end of the next block's forward (or when
  the backward starts), after the compute stream waits for block ``k``'s copies;
* backward: the GPU buffers block ``k``'s tensors come back into are allocated, on the compute
  stream, when the backward reaches the output of block ``k + 1`` (or of block ``k`` itself
  when it is the last), and each is let go when autograd has used it.

A checkpointed block saves only its inputs outside its recompute (``torch.utils.checkpoint``
saves them under the hooks around it), so the same wrapping around memfit's checkpointing
offloads exactly those inputs (``checkpoints=True``, DeepSpeed's ``cpu_checkpointing``). The
host copies are counted as pinned (rounded up to a power of two) and refused with
:class:`~memfit.HostMemoryError` before they would leave the host short.

Everything is allocated on the compute stream: the side stream only copies, and the compute
stream waits for its copies before it uses or reuses what they touched, so nothing needs
``record_stream`` (which the emulator does not model). On a device without streams (the trace's
meta tensors, CPU tensors) the same program runs with every copy in order; in a trace nothing is
copied and an :class:`OffloadObserver` is told of each transfer and wait instead.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from memfit._errors import HostMemoryError, InvalidInputError
from memfit._host_memory import free_host_memory, pinned_size
from memfit._tensors import is_dense
from memfit._units import format_bytes
from memfit.technique._base import CopyObserver
from memfit.technique.checkpointing import (
    call_forward,
    checkpointed_blocks,
    checkpointing_on,
    chosen_blocks,
    find_blocks,
    unwrap_forward,
    wrap_forward,
)

__all__ = [
    "MIN_OFFLOAD_BYTES",
    "ActivationOffload",
    "OffloadObserver",
    "check_offload",
    "offload_blocks",
    "offloader_of",
]

MIN_OFFLOAD_BYTES = 256 * 1024  # smaller saved tensors stay: their copies cost more than they free
HOST_RESERVE = 1 << 30  # host memory the offload leaves free beside its copies
_MARK = "_memfit_offloaded"
_OWNER = "_memfit_offload"


OffloadObserver = CopyObserver  # what a trace is told of the copies it does not run


def check_offload(value: object) -> float:
    """``offload=`` as the share of blocks it offloads (0: none): ``True`` is every block."""
    if value is None or value is False:
        return 0.0
    if value is True:
        return 1.0
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1:
        return float(value)
    raise InvalidInputError(
        f"offload={value!r} is not a share of blocks: give True (every block's saved "
        "activations to pinned host memory), a fraction such as 0.5 (that share of the blocks, "
        "spread evenly) or False."
    )


@dataclass(eq=False)
class _Saved:
    """One saved tensor, off the GPU: its layout, its host copy, and while it is back on the
    GPU, the buffer; ``uses``: the unpacks autograd has still to make of it."""

    size: torch.Size
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    nbytes: int
    host: torch.Tensor | None
    group: _Group
    uses: int = 0
    gpu: torch.Tensor | None = None
    __weakref__: Any = field(default=None, init=False, repr=False)


@dataclass(eq=False)
class _Group:
    """What one call of an offloaded block saved."""

    saved: list[weakref.ref[_Saved]] = field(default_factory=list)
    by_key: dict[tuple[Any, ...], _Saved] = field(default_factory=dict)
    held: list[torch.Tensor] = field(default_factory=list)  # GPU tensors until released
    copied: Any = None  # the side stream's event after the forward's copies
    fetched: Any = None  # ... after the backward's; None: not fetched yet
    waited: bool = False


class _Streams:
    """The side stream of a CUDA device; elsewhere (meta, CPU) copies run in order, events are
    numbers, and an observer is told of both."""

    def __init__(self, device: torch.device, observer: OffloadObserver | None) -> None:
        self.side = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.observer = observer
        self.events = 0

    def copying(self) -> AbstractContextManager[Any]:
        """Copies after everything the compute stream has issued, on the side stream."""
        if self.side is None:
            return nullcontext()
        self.side.wait_stream(torch.cuda.current_stream(self.side.device))
        return torch.cuda.stream(self.side)

    def record(self) -> Any:
        if self.side is not None:
            return self.side.record_event()
        self.events += 1
        if self.observer is not None:
            self.observer.marked(self.events)
        return self.events

    def copied(self, direction: str, nbytes: int) -> None:
        if self.observer is not None:
            self.observer.copied(direction, nbytes)

    def fetched(self, t: torch.Tensor) -> None:
        if self.observer is not None:
            self.observer.fetched(t)

    def wait(self, event: Any) -> None:
        if self.side is not None:
            torch.cuda.current_stream(self.side.device).wait_event(event)
        elif self.observer is not None:
            self.observer.waited(event)


class ActivationOffload:
    """The offload of a model's blocks; :meth:`remove` takes it off again."""

    def __init__(
        self,
        model: nn.Module,
        blocks: list[nn.Module],
        offloaded: list[nn.Module],
        *,
        min_bytes: int = MIN_OFFLOAD_BYTES,
    ) -> None:
        self.blocks = blocks
        self.offloaded = offloaded
        # of those, the blocks memfit checkpoints: only their inputs are saved, so offloaded
        wrapped = {id(b) for b in checkpointed_blocks(model)}
        self.checkpointed = [b for b in offloaded if id(b) in wrapped]
        self.min_bytes = min_bytes
        self.observer: OffloadObserver | None = None
        self._model = weakref.ref(model)
        self._params = {id(p) for p in model.parameters()}  # the model holds them: ids stay
        self._streams: dict[torch.device, _Streams] = {}
        self._calls: list[_Group | None] = []  # this forward's block calls, in order
        self._last_index = -1
        self._pending: list[_Group] = []  # offloaded calls whose GPU tensors are still held
        # host memory: what the copies hold now and held at most (as pinned, rounded up: the
        # pinned allocator keeps what it took, so only a new high needs free memory)
        self.host_reserve = HOST_RESERVE
        self.free_host: Callable[[], int | None] = free_host_memory
        self._host_live = self._host_most = 0
        self._host_free: int | None = None  # read once per call of a block, then counted down
        chosen = {id(b) for b in offloaded}
        for index, block in enumerate(blocks):
            on = id(block) in chosen
            wrap_forward(
                block, _MARK, lambda f, i=index, on=on: functools.partial(self._run, f, i, on)
            )
        model.__dict__[_OWNER] = self

    def remove(self) -> None:
        """Put the blocks' forwards back (another wrapper's too)."""
        for block in self.blocks:
            unwrap_forward(block, _MARK)
        model = self._model()
        if model is not None:
            model.__dict__.pop(_OWNER, None)

    def __enter__(self) -> ActivationOffload:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    # -- forward ----------------------------------------------------------------------------
    def _wrapper(self, index: int, offloaded: bool) -> Any:
        """What makes block ``index``'s forward: its own, run by :meth:`_run`."""
        return lambda forward: functools.partial(self._run, forward, index, offloaded)

    def _run(self, forward: Any, index: int, offloaded: bool, *args: Any, **kwargs: Any) -> Any:
        fn = call_forward(forward)
        if not torch.is_grad_enabled():
            return fn(*args, **kwargs)
        if index <= self._last_index:  # a new forward: the calls before are another graph's
            self._calls = []
        self._last_index = index
        self._host_free = None
        calls = self._calls
        group = _Group() if offloaded else None
        hooks: AbstractContextManager[Any] = (
            torch.autograd.graph.saved_tensors_hooks(
                functools.partial(self._pack, group), self._unpack
            )
            if group is not None
            else nullcontext()
        )
        try:
            with hooks:
                out = fn(*args, **kwargs)
        except BaseException:  # an OOM: what earlier blocks held goes now, not at the retry
            self._release()
            raise
        calls.append(group)
        self._release(keep=group)
        if group is not None and group.saved:
            group.copied = self._streams_for(group).record()
            self._pending.append(group)
        _on_gradient(out, functools.partial(self._reached, calls, len(calls) - 1))
        return out

    def _streams_for(self, group: _Group) -> _Streams:
        saved = next(s for s in (r() for r in group.saved) if s is not None)
        return self._streams_of(saved.device)

    def _streams_of(self, device: torch.device) -> _Streams:
        streams = self._streams.get(device)
        if streams is None:
            streams = self._streams[device] = _Streams(device, self.observer)
        return streams

    def _offloadable(self, t: torch.Tensor) -> bool:
        if id(t) in self._params or (t._base is not None and id(t._base) in self._params):
            return False
        nbytes = t.numel() * t.element_size()
        return nbytes >= self.min_bytes and is_dense(t) and not t.is_sparse

    def _pack(self, group: _Group, t: torch.Tensor) -> Any:
        if not self._offloadable(t):
            return t
        key = (_storage_key(t), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)
        saved = group.by_key.get(key)
        if saved is None:
            streams = self._streams_of(t.device)
            nbytes = t.numel() * t.element_size()
            self._take_host(t, nbytes)
            with streams.copying():
                host = _to_host(t)
            streams.copied("d2h", nbytes)
            saved = _Saved(t.shape, t.stride(), t.dtype, t.device, nbytes, host, group)
            if host is not None:
                weakref.finalize(saved, self._give_host, pinned_size(nbytes))
            group.by_key[key] = saved
            group.saved.append(weakref.ref(saved))
            group.held.append(t)
        saved.uses += 1
        return saved

    def _take_host(self, t: torch.Tensor, nbytes: int) -> None:
        """Count ``t``'s host copy; refused (:class:`HostMemoryError`) where it would take the
        host below :attr:`host_reserve` free."""
        if t.device.type == "meta":
            return
        size = pinned_size(nbytes)
        grows = self._host_live + size - self._host_most
        if grows > 0:
            if self._host_free is None:
                self._host_free = self.free_host()
            if self._host_free is not None:
                if self._host_free - grows < self.host_reserve:
                    raise HostMemoryError(_host_message(self, size))
                self._host_free -= grows
            self._host_most += grows
        self._host_live += size

    def _give_host(self, size: int) -> None:
        self._host_live -= size

    def _release(self, keep: _Group | None = None) -> None:
        """Let go of the GPU tensors of the offloaded calls before ``keep``, once the compute
        stream has waited for their copies."""
        still = []
        for group in self._pending:
            if group is keep:
                still.append(group)
                continue
            self._streams_for(group).wait(group.copied)
            group.held.clear()
            group.by_key.clear()
        self._pending = still

    # -- backward ---------------------------------------------------------------------------
    def _reached(self, calls: list[_Group | None], index: int) -> None:
        """The backward reached call ``index``'s output: its tensors must come back now (if the
        call before did not bring them), and the call before it's ahead of need."""
        self._release()
        for at in (index, index - 1):
            group = calls[at] if at >= 0 else None
            if group is not None and group.fetched is None:
                self._fetch(group)

    def _fetch(self, group: _Group) -> None:
        saved = [s for s in (r() for r in group.saved) if s is not None and s.gpu is None]
        group.fetched = True
        if not saved:
            return
        streams = self._streams_of(saved[0].device)
        buffers = []
        for s in saved:  # on the compute stream: reused only after its waits
            buffers.append(torch.empty_strided(s.size, s.stride, dtype=s.dtype, device=s.device))
            streams.fetched(buffers[-1])
        with streams.copying():
            for s, gpu in zip(saved, buffers, strict=True):
                _copy_back(gpu, s.host)
                streams.copied("h2d", s.nbytes)
                s.gpu = gpu
        group.fetched = streams.record()

    def _unpack(self, packed: Any) -> torch.Tensor:
        if isinstance(packed, torch.Tensor):
            return packed
        saved: _Saved = packed
        group = saved.group
        self._release()
        if group.fetched is None:  # no output of the block's was reached: fetch it now
            self._fetch(group)
        streams = self._streams_of(saved.device)
        if not group.waited:
            streams.wait(group.fetched)
            group.waited = True
        gpu = saved.gpu
        if gpu is None:  # a second backward through the same graph: one copy, in order
            gpu = torch.empty_strided(
                saved.size, saved.stride, dtype=saved.dtype, device=saved.device
            )
            with streams.copying():
                _copy_back(gpu, saved.host)
            streams.wait(streams.record())
            return gpu
        saved.uses -= 1
        if saved.uses <= 0:
            saved.gpu = None
        return gpu


def _host_message(offload: ActivationOffload, size: int) -> str:
    free = offload._host_free or 0
    return (
        f"Activation offload stopped: its next host copy ({format_bytes(size)}, with "
        f"{format_bytes(offload._host_live)} already copied in this step) would leave the host "
        f"less than {format_bytes(offload.host_reserve)} free ({format_bytes(free)} free now), "
        "and pinned memory cannot be swapped out. Offload fewer blocks (a smaller share, or "
        "more of them checkpointed: memfit.plan weighs both), use a smaller micro-batch, or "
        "free host memory; memfit.estimate's note gives the host memory an offload takes."
    )


def _on_gradient(out: Any, reached: Callable[[], None]) -> None:
    """Call ``reached`` when the backward reaches the first output that needs a gradient."""

    def hook(grad: torch.Tensor) -> None:
        reached()

    leaves, _ = tree_flatten(out)
    for t in leaves:
        if isinstance(t, torch.Tensor) and t.requires_grad and t.grad_fn is not None:
            t.register_hook(hook)
            return


def _storage_key(t: torch.Tensor) -> int:
    return int(t.untyped_storage()._cdata)


def _to_host(t: torch.Tensor) -> torch.Tensor | None:
    """``t``'s host copy (pinned for a GPU tensor, so the copy does not stall the host); None
    for a meta tensor, which has nothing to copy."""
    if t.device.type == "meta":
        return None
    host = torch.empty_strided(
        t.shape, t.stride(), dtype=t.dtype, device="cpu", pin_memory=t.device.type == "cuda"
    )
    host.copy_(t.detach(), non_blocking=True)
    return host


def _copy_back(gpu: torch.Tensor, host: torch.Tensor | None) -> None:
    if host is not None:
        gpu.copy_(host, non_blocking=True)


def offload_blocks(
    model: nn.Module,
    share: float,
    *,
    checkpoints: bool = False,
    min_bytes: int = MIN_OFFLOAD_BYTES,
) -> ActivationOffload:
    """Offload ``share`` of ``model``'s repeated blocks (spread evenly) that memfit does not
    checkpoint, and with ``checkpoints`` the inputs of every block it does (what a checkpointed
    block keeps for its recompute: DeepSpeed's ``cpu_checkpointing``); returns the offload
    (its :meth:`~ActivationOffload.remove` takes it off)."""
    if offloader_of(model) is not None:
        raise InvalidInputError(
            f"{type(model).__name__} already has memfit's activation offload on: remove it "
            "(the handle offload_activations returned, .remove()) before offloading again."
        )
    if checkpointing_on(model):
        raise InvalidInputError(
            f"{type(model).__name__} has gradient checkpointing switched on "
            "(gradient_checkpointing_enable()): its checkpoint runs outside the forward memfit "
            "wraps, so the offload would copy the recompute's tensors, not the block's inputs. "
            "Switch it off and checkpoint with memfit (memfit.apply, or estimate with "
            "activation_checkpointing=True or a share such as 0.5), whose checkpointed blocks' "
            "inputs are offloaded with checkpoints=True."
        )
    blocks = find_blocks(model)
    wrapped = checkpointed_blocks(model)
    if checkpoints and not wrapped:
        raise InvalidInputError(
            f"checkpoints=True offloads the inputs of checkpointed blocks, but none of "
            f"{type(model).__name__}'s blocks is checkpointed by memfit. Checkpoint first "
            "(activation_checkpointing=True or a share such as 0.5 in memfit.estimate, or a "
            "plan through memfit.apply), or offload with checkpoints=False."
        )
    free = [b for b in blocks if b not in wrapped]
    chosen = {id(b) for b in chosen_blocks(free, share)}
    if checkpoints:
        chosen.update(id(b) for b in wrapped)
    offloaded = [b for b in blocks if id(b) in chosen]
    return ActivationOffload(model, blocks, offloaded, min_bytes=min_bytes)


def offloader_of(model: nn.Module) -> ActivationOffload | None:
    """The activation offload on ``model``, if there is one."""
    found = model.__dict__.get(_OWNER)
    return found if isinstance(found, ActivationOffload) else None
