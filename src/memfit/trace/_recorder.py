"""The dispatch layer of a trace: every storage that appears, and when it dies.

:class:`Recorder` sits below autograd, so it sees each aten op the step runs, forward and
backward, with its outputs. A storage it has not seen is an allocation; a finalizer on the
storage records the free when the last tensor using it goes. It also adds what real CUDA
kernels allocate that meta kernels do not (cuBLAS workspaces), and answers data-dependent
scalars (``.item()``, ``.all()``) the way real data would.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from memfit._events import AllocationInfo, Category, MemoryEvent
from memfit.trace._backward_fills import REWRITTEN_IN_BACKWARD, backward_form
from memfit.trace._costs import StepCosts
from memfit.trace._cpu_scalars import call_with_cpu_scalars
from memfit.trace._cuda_checks import refuse_as_cuda
from memfit.trace._cuda_composites import cuda_composite
from memfit.trace._data_shapes import (
    INDEX,
    MASKED_SELECT,
    has_mask,
    index_by_positions,
    put_by_positions,
    puts_by_positions,
    select_by_positions,
)
from memfit.trace._fake_kernels import FakeContext, fake_kernel
from memfit.trace._grad_owners import GradOwners
from memfit.trace._kernel_calls import CallSite, KernelCalls
from memfit.trace._kernels import RULE_OPS, KernelModel, Scratch
from memfit.trace._layouts import cuda_layout, cuda_order
from memfit.trace._leaves import tensors_in
from memfit.trace._meta_cache import META_CACHE
from memfit.trace._nonzero import NONZERO, around_nonzero
from memfit.trace._scratch import Nested, Order, run_groups
from memfit.trace._shadow import ShadowValues

__all__ = ["Recorder"]

aten = torch.ops.aten
# who owns memory allocated outside any module, by phase
_PHASE_OWNER = {
    "optimizer": "(optimizer step)",
    "input": "(input batch)",
    "zero_grad": "(zero_grad)",
    "setup": "(model build)",
}


_ADD = torch.ops.aten.add.Tensor
# Bookkeeping that only reads tensors' metadata (shape, strides, storage) runs with torch-function
# handling off: each such read would otherwise pass through the trace's TorchFunctionMode, which
# leaves it unchanged (about 60,000 reads in a Llama-2-7B step, most of the trace's mode calls).
_NO_FUNCTION_MODE = torch._C.DisableTorchFunction
_ADD_INPLACE = torch.ops.aten.add_.Tensor
_INDEX_PUT = torch.ops.aten.index_put.default
_INDEX_PUT_IMPL = torch.ops.aten._index_put_impl_.default
_COMPOSITE: dict[Any, bool] = {}  # op -> whether CUDA runs it as its decomposition (below)


_ONE_AFTER_ANOTHER: Order = (False, "before")  # scratch between outputs: each freed at once

_INDEXING = frozenset(
    {aten.index.Tensor, aten.index_put.default, aten.index_put_.default, _INDEX_PUT_IMPL}
)


# ops with a composite and a CUDA kernel (torch 2.11-2.14), which a CPU build of torch registers
# without the CUDA kernel: not composites on the GPU, whatever build traces them
_CUDA_KERNEL_IN_CUDA_BUILDS = frozenset({"aten::_fused_rms_norm", "aten::mish_backward"})


def _composite(func: Any) -> bool:
    """Whether ``func`` is an op that CUDA runs as its decomposition: a
    CompositeImplicitAutograd kernel and no kernel of its own (``silu_backward`` has both).

    With autograd on (or under ``no_grad``) the autograd key decomposes such ops (``item``,
    ``linear``, ``layer_norm``, ``reshape``), so a dispatch mode sees their pieces. Under
    ``torch.inference_mode`` the mode sees the op whole; run as a whole on meta tensors, its
    pieces would pass below the mode, unrecorded and unanswered (``item`` fails on meta).
    """
    known = _COMPOSITE.get(func)
    if known is None:
        name = func.name() if isinstance(func, torch._ops.OpOverload) else ""
        has = torch._C._dispatch_has_kernel_for_dispatch_key
        own = ("CUDA", "Meta", "CompositeExplicitAutograd")
        known = bool(name) and has(name, "CompositeImplicitAutograd")
        known = known and not any(has(name, key) for key in own)
        known = known and name not in _CUDA_KERNEL_IN_CUDA_BUILDS
        _COMPOSITE[func] = known
    return known


def _any_of(types: tuple[type, ...], args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether an argument (or a tensor in a list argument) is of one of ``types``."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, types):
            return True
        if isinstance(value, (list, tuple)) and any(isinstance(v, types) for v in value):
            return True
    return False


class Recorder(TorchDispatchMode):
    """Records allocation and free events of meta storages, in program order."""

    def __init__(self, kernels: KernelModel, shadows: ShadowValues) -> None:
        super().__init__()
        self.events: list[MemoryEvent] = []
        self.infos: list[AllocationInfo] = []
        self.kernels = kernels
        self.shadows = shadows
        shadows.routing.module_of = lambda: self.module_of()  # where a router chose
        self.phase = "setup"
        self.module_of: Callable[[], str] = lambda: ""
        self._live: dict[int, tuple[int, int]] = {}  # storage key -> (block, nbytes)
        self._block_info: dict[int, int] = {}  # block -> info index
        self._next_block = 1
        self._lock = threading.Lock()
        self.notes: list[str] = []
        self.category_hint: Category | None = None
        self.forward_first_info = 0
        self.param_owner: dict[int, str] = {}  # id(parameter) -> owning module path
        self.failure: tuple[str, str] | None = None  # (op, module) of the last op that raised
        self.suspended = 0  # > 0 while a fused in-place kernel runs as several meta ops
        self.grad_owners = GradOwners(self._op_of)  # who made each gradient (in place)
        self.persistent: set[int] = set()  # blocks a library handle keeps (never freed)
        self.costs: StepCosts | None = None  # each op's arithmetic and traffic, when asked
        self.stream_of: Callable[[], int] = lambda: 0  # the stream allocations are made on
        # tensor subclasses (FSDP2's DTensor) whose ops this mode lets them run as ops on the
        # plain tensors inside them, which it then sees
        self.pass_through: tuple[type, ...] = ()
        self._host_depth = 0
        self._off_device: set[int] = set()  # storages made off the GPU (``host``)
        # the events before which the traced code emptied the cache (torch.cuda.empty_cache:
        # DeepSpeed's ZeRO does while it builds its flat buffers)
        self.empty_cache_at: list[int] = []
        # the calls whose kernels allocate by a rule, when asked (a batch model asks them again)
        self.calls: KernelCalls | None = None
        self._made: list[int] = []  # the events the current op's rules allocated
        self.fake_context = FakeContext(
            shadows.get, lambda: self.module_of(), shadows.guesses.append
        )

    # -- allocation bookkeeping ------------------------------------------------------------
    def _key(self, storage: torch.UntypedStorage) -> int:
        return int(storage._cdata)

    def alloc(
        self, nbytes: int, category: Category, op: str, shape: tuple[int, ...] = (), dtype: str = ""
    ) -> int:
        """Record an allocation that no storage stands for (a workspace); returns its block."""
        with self._lock:
            block = self._next_block
            self._next_block += 1
            module = self._owner()
            self.infos.append(AllocationInfo(category, op, module, self.phase, shape, dtype))
            self._block_info[block] = len(self.infos) - 1
            self.events.append(
                MemoryEvent("alloc", block, nbytes, self.stream_of(), len(self.infos) - 1)
            )
        return block

    def free(self, block: int) -> None:
        with self._lock:
            self.events.append(MemoryEvent("free", block, 0))

    def _rule_alloc(self, nbytes: int, category: Category, op: str) -> int:
        """An allocation a kernel rule adds (a copy, a workspace), noted for the op's call."""
        block = self.alloc(nbytes, category, op)
        self._made.append(len(self.events) - 1)
        return block

    def _owner(self) -> str:
        """The module an allocation made now is charged to."""
        return self.module_of() or _PHASE_OWNER.get(self.phase.rpartition(".")[2], "")

    def copy_alloc(self, event: MemoryEvent, info: AllocationInfo) -> int:
        """Record an allocation like ``event`` (made by another step), described by ``info``."""
        with self._lock:
            block = self._next_block
            self._next_block += 1
            self.infos.append(info)
            self._block_info[block] = len(self.infos) - 1
            self.events.append(
                MemoryEvent("alloc", block, event.size, event.stream, len(self.infos) - 1)
            )
        return block

    def adopt(self, t: torch.Tensor, block: int) -> None:
        """Let ``t``'s storage, made without an event, stand for ``block``: it is freed when
        the storage goes."""
        storage = t.untyped_storage()
        key = self._key(storage)
        self._live[key] = (block, int(storage.nbytes()))
        weakref.finalize(storage, self._finalized, key)

    def live_blocks(self) -> set[int]:
        return {block for block, _ in self._live.values()}

    def info(self, block: int) -> AllocationInfo:
        return self.infos[self._block_info[block]]

    def empty_cache(self) -> None:
        """``torch.cuda.empty_cache()`` ran here: the replay frees the cached segments."""
        at = len(self.events)
        if not self.empty_cache_at or self.empty_cache_at[-1] != at:
            self.empty_cache_at.append(at)

    @contextlib.contextmanager
    def host(self) -> Iterator[None]:
        """Storages made while this lasts are not on the GPU (a model built on the host that
        FSDP2 then shards): never recorded, nor any view of them."""
        self._host_depth += 1
        try:
            yield
        finally:
            self._host_depth -= 1

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Ops run while this lasts allocate nothing on the GPU (bookkeeping on meta tensors)."""
        self.suspended += 1
        try:
            yield
        finally:
            self.suspended -= 1

    def claim(self, t: torch.Tensor, category: Category, op: str) -> None:
        """``t``, made off the GPU (``host``), is on it from now on (a buffer FSDP2 moves)."""
        self._off_device.discard(self._key(t.untyped_storage()))
        self.track(t, category, op)

    def storage_allocated(self, t: torch.Tensor) -> None:
        """``t``'s storage, empty until now, was given its memory again (FSDP2's all-gather
        output, resized back before an all-gather)."""
        self.storage_freed(t)  # its block before the resize, if the trace still held one
        self.track(t, Category.TEMPORARY, "fsdp.alloc_storage")

    def storage_freed(self, t: torch.Tensor) -> None:
        """``t``'s storage is about to be resized to nothing (FSDP2's reshard)."""
        seen = self._live.pop(self._key(t.untyped_storage()), None)
        if seen is not None:
            self.free(seen[0])

    def track(self, t: torch.Tensor, category: Category, op: str) -> int | None:
        """Record ``t``'s storage if it is new; returns its block either way."""
        if t.device.type != "meta" or t.is_sparse:
            return None
        if self.pass_through:  # a DTensor's memory is its shard's
            t = getattr(t, "_local_tensor", t)
        storage = t.untyped_storage()
        key = self._key(storage)
        if key in self._off_device:
            return None
        if self._host_depth:
            self._off_device.add(key)
            weakref.finalize(storage, self._off_device.discard, key)
            return None
        nbytes = int(storage.nbytes())
        seen = self._live.get(key)
        if seen is not None:
            block, old = seen
            if nbytes <= old:
                return block
            # resize_: the CUDA storage allocates the larger buffer, then frees the old one
            new_block = self.alloc(
                nbytes, self.info(block).category, op, tuple(t.shape), str(t.dtype)
            )
            self.free(block)
            self._live[key] = (new_block, nbytes)
            return new_block
        if nbytes == 0:
            return None
        block = self.alloc(nbytes, category, op, tuple(t.shape), str(t.dtype).replace("torch.", ""))
        self._live[key] = (block, nbytes)
        if self.phase.endswith("backward"):  # only gradients are ever asked about
            self.grad_owners.allocated(key)
        weakref.finalize(storage, self._finalized, key)
        return block

    def _finalized(self, key: int) -> None:
        self.grad_owners.freed(key)
        seen = self._live.pop(key, None)
        if seen is not None:
            self.free(seen[0])

    def name(self, t: torch.Tensor, op: str) -> None:
        """Say what made ``t``'s storage when the op that allocated it says too little."""
        block = self.block_of(t)
        if block is not None:
            self.info(block).op = op

    def _op_of(self, t: torch.Tensor) -> str | None:
        """The op that allocated ``t``'s storage (None: not recorded)."""
        block = self.block_of(t)
        return None if block is None else self.info(block).op

    def block_of(self, t: torch.Tensor) -> int | None:
        if t.device.type != "meta":
            return None
        if self.pass_through:  # a DTensor's memory is its shard's
            t = getattr(t, "_local_tensor", t)
        seen = self._live.get(self._key(t.untyped_storage()))
        return None if seen is None else seen[0]

    def mark_live_since(self, first_info: int, category: Category) -> None:
        """Give ``category`` to live temporaries allocated at or after info ``first_info``."""
        for block, _ in self._live.values():
            index = self._block_info[block]
            if index >= first_info and self.infos[index].category is Category.TEMPORARY:
                self.infos[index].category = category

    def set_category(
        self,
        t: torch.Tensor,
        category: Category,
        *,
        force: bool = False,
        module: str | None = None,
    ) -> None:
        block = self.block_of(t)
        if block is None:
            return
        info = self.info(block)
        if force or info.category in (Category.TEMPORARY, Category.ACTIVATION):
            info.category = category
            if module is not None:
                info.module = module

    def record_kernel(self, family: str, moved: list[tuple[torch.Tensor, int]]) -> None:
        """Count a kernel that no op dispatches (a compiled wrapper's triton kernel) as one
        ``mem:<family>`` op of the current phase: ``moved`` is each tensor it reads or writes
        with how often."""
        if self.costs is not None and not self.suspended:
            self.costs.record_kernel(family, moved, self.phase)

    # -- the dispatch hook ------------------------------------------------------------------
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """False: no ``torch._disable_dynamo`` wrapper around :meth:`__torch_dispatch__` (the
        opt-out ``TorchDispatchMode`` offers). Nothing is compiled while a step is traced
        (``trace._compiled``), and the wrapper costs a call per op and, at the first op, the
        import of ``torch._dynamo`` (a second or more, for a model that does not import it)."""
        return False

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if self.pass_through and _any_of(self.pass_through, args, kwargs):
            return NotImplemented  # the subclass runs it as ops on its plain tensors
        if _composite(func):  # as CUDA runs it: its pieces, each seen by this mode
            with self:
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        if func in REWRITTEN_IN_BACKWARD:  # backward formulas as the GPU runs them
            with _NO_FUNCTION_MODE():
                fresh = functools.partial(self.grad_owners.fresh, self.phase)
                func, form = backward_form(func, args, fresh)
            if form is not None:
                with self:
                    return form(*args, **kwargs)
        composite = cuda_composite(func)
        if composite is not None:  # a CUDA kernel written as other ops: those ops
            with self:
                out = composite(*args, **kwargs)
            if out is not NotImplemented:
                return out
        if (func is INDEX and has_mask(args[1])) or func is MASKED_SELECT:
            with self:  # by the mask's positions (nonzero), as CUDA does
                if func is INDEX:
                    return index_by_positions(*args)
                return select_by_positions(*args, **kwargs)
        if func is _ADD:
            with _NO_FUNCTION_MODE():
                if self.grad_owners.accumulates_in_place(self.phase, args, kwargs):
                    func = _ADD_INPLACE
        elif func is _INDEX_PUT:
            with _NO_FUNCTION_MODE():
                if self.grad_owners.scatters_into_fresh_zeros(self.phase, args, kwargs):
                    func, args, kwargs = _INDEX_PUT_IMPL, (*args[:3], True, True), {}
        if puts_by_positions(func, args, kwargs):
            try:
                refuse_as_cuda(func, args)  # values of another dtype than the destination's
            except Exception as exc:
                self._failed(func, func.overloadpacket.__name__, exc)
                raise
            with self:  # by the masks' positions (nonzero), as CUDA does
                return put_by_positions(func, args, kwargs)
        name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
        try:
            special = self.shadows.answer(func, args, kwargs, self)
        except Exception as exc:
            self._failed(func, name, exc)
            raise
        if func in _INDEXING:
            self._track_unseen_indices(args[1])
        copies: list[int] = []
        self._made = []
        start = scratch_at = len(self.events)
        if special is not None:
            out = special.value
        else:
            copies = [
                self._rule_alloc(nbytes, Category.TEMPORARY, label)
                for nbytes, label in self.kernels.copies_first(func, args, kwargs)
            ]
            try:
                refuse_as_cuda(func, args)  # what CUDA refuses and meta kernels let through
                fake = fake_kernel(func)  # an op without a meta kernel: memfit's own
                made = (
                    call_with_cpu_scalars(META_CACHE.call, func, args, kwargs)
                    if fake is None
                    else fake(args, kwargs, self.fake_context)
                )
                out = cuda_layout(func, args, made)
            except Exception as exc:
                self._failed(func, name, exc)
                raise
            self.shadows.propagate(func, args, kwargs, out)
        if self.costs is not None and not self.suspended and not self._host_depth:
            with _NO_FUNCTION_MODE():  # (what runs on the host is no GPU time)
                self.costs.record(func, args, kwargs, out, self.phase)
        between = None if special is not None else self.kernels.between_outputs(func, args)
        early = self.kernels.copies_freed_after(func) if copies and between else None
        logged = self.calls is not None and special is None
        marks: list[int] | None = [] if logged else None
        with self._around_dynamic(func, args, special):
            self._track_outputs(
                cuda_order(func, out),
                name,
                between,
                (early, copies) if early is not None else None,
                marks,
            )
        if early is not None:  # freed among the outputs, after output ``early``
            copies = []
        if special is None:
            # a library handle's workspace is created when the kernel is first launched,
            # after the op has allocated its outputs (H200 traces)
            for nbytes, label in self.kernels.before(func, args, kwargs, self.phase):
                self.persistent.add(self.alloc(nbytes, Category.WORKSPACE, label))
            scratch_at = len(self.events)
            # kernel-internal scratch: allocated after the outputs, freed when the kernel ends
            self._scratch_groups(
                self.kernels.scratch(func, args, kwargs), self.kernels.scratch_order(func)
            )
        for block in copies:
            self.free(block)
        if logged and (self._made or func in RULE_OPS):
            self._log_call(func, args, kwargs, start, marks or [], scratch_at)
        return out

    def _track_unseen_indices(self, indices: Any) -> None:
        """Index tensors the trace has not seen made: Python indexing with a sequence
        (``x[[0, 2]]``) makes them in C++, on the GPU, below any dispatch mode; they live as
        long as autograd keeps them (H100 op sweep, torch 2.11: ``__getitem__`` with two lists
        of two, two 16-byte blocks before the output, kept for backward)."""
        for index in indices if isinstance(indices, (list, tuple)) else ():
            if isinstance(index, torch.Tensor) and self.block_of(index) is None:
                self.track(index, Category.TEMPORARY, "index made from a Python sequence")

    def _around_dynamic(self, func: Any, args: tuple[Any, ...], special: Any) -> Any:
        """The buffers CUDA's ``nonzero`` makes around the output its values size."""
        if special is None or func is not NONZERO:
            return contextlib.nullcontext()
        alloc = lambda nbytes, label: self.alloc(nbytes, Category.TEMPORARY, label)  # noqa: E731
        return around_nonzero(args[0], self.kernels.sm_count, alloc, self.free)

    def _log_call(
        self,
        func: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        start: int,
        marks: list[int],
        scratch_at: int,
    ) -> None:
        """Log a call whose kernel a rule covers and where its rules' allocations went."""
        assert self.calls is not None
        call = self.calls.record(func, args, kwargs)
        site = CallSite(
            call,
            start,
            tuple(marks),
            scratch_at,
            len(self.events),
            tuple(self._made),
            self.suspended > 0,
            self._owner(),
            self.phase,
            self.stream_of(),
        )
        self.calls.sites.append(site)

    def _failed(self, func: Any, name: str, exc: Exception) -> None:
        """Remember the op that raised ``exc``, and mark ``exc`` with it: the model may catch
        it and fail later for another reason, and only a failure whose exception carries the
        mark is this op's (``_failure.trace_error``)."""
        self.failure = (str(func.name()) if hasattr(func, "name") else name, self.module_of())
        with contextlib.suppress(AttributeError):  # a type without a __dict__: not marked
            exc.memfit_failed_op = self.failure  # type: ignore[attr-defined]

    def _scratch_groups(self, groups: Sequence[list[Scratch] | Nested], order: Order) -> None:
        """A kernel's scratch groups, allocated and freed as :func:`run_groups` says."""

        def alloc(item: Scratch) -> int:
            return self._rule_alloc(item[0], Category.WORKSPACE, item[1])

        def free(blocks: list[int]) -> None:
            for block in blocks:
                self.free(block)

        run_groups(groups, order, alloc, free)

    def _track_outputs(
        self,
        out: Any,
        name: str,
        between: dict[int, list[tuple[int, str]]] | None = None,
        copies_after: tuple[int, list[int]] | None = None,
        marks: list[int] | None = None,
    ) -> None:
        """Record an op's outputs; ``between`` puts a kernel's scratch after output i (cuDNN's
        backward frees the input gradient's workspace before it makes the weight gradient);
        ``copies_after`` = (i, blocks): the op's copies of its inputs, freed after output i;
        ``marks`` gets the event after each output's (a logged call's site)."""
        if self.suspended:
            for block in copies_after[1] if copies_after is not None else ():
                self.free(block)
            return
        category = self.category_hint or Category.TEMPORARY
        with _NO_FUNCTION_MODE():
            items = list(out) if between is not None else [out]
            for i, item in enumerate(items):
                for t in tensors_in(item):
                    self.track(t, category, name)
                if marks is not None:
                    marks.append(len(self.events))
                for workspace in between.get(i, []) if between is not None else ():
                    self._scratch_groups([[workspace]], _ONE_AFTER_ANOTHER)
                if copies_after is not None and i == min(copies_after[0], len(items) - 1):
                    for block in reversed(copies_after[1]):  # the last made goes first
                        self.free(block)
