"""Run a workload's real step code on meta tensors and record every allocation and free.

The layers, outside in: :class:`TraceFunctionMode` (devices, autocast, attention kernel) above
autograd; :class:`Recorder` (allocations, workspaces, data-dependent values) below it. The model
is built inside the trace, so parameters are allocated in the order a GPU build allocates them.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_unflatten

from memfit._errors import InvalidInputError, MemfitError
from memfit._events import AllocationInfo, Category, MemoryEvent
from memfit._gpus import GPU
from memfit.technique import active_techniques
from memfit.technique.data_parallel import host_bytes, parallel_group
from memfit.trace import _autocast
from memfit.trace._compiled import CaptureNeeded, CompileGuard
from memfit.trace._compiled_capture import CompiledPlan, capture_compiled
from memfit.trace._compiled_replay import (
    COLD_CACHE_NOTE,
    compiled_notes,
    first_run_reserving_most,
)
from memfit.trace._costs import StepCosts
from memfit.trace._failure import check_batch, checked_loss, describe_batch
from memfit.trace._failure import trace_error as _explain
from memfit.trace._fake_kernels import cudnn_ctc_note
from memfit.trace._function_mode import TraceFunctionMode, python_function_reentry
from memfit.trace._generate import generation_observed
from memfit.trace._host_place import TracedHost
from memfit.trace._kernel_calls import KernelCalls
from memfit.trace._kernels import KernelModel
from memfit.trace._library_autocast import meta_autocast_as_cuda
from memfit.trace._library_caches import library_caches_kept
from memfit.trace._modules import ModuleTracker
from memfit.trace._parallel_trace import (
    claim_buffers,
    offloaded_optimizer,
    rank_notes,
    sharded_build,
    shards_note,
    uneven_shards,
)
from memfit.trace._recorder import Recorder
from memfit.trace._repeat import StepRepeat, Tallies
from memfit.trace._rnn import RnnHooks, flatten_like_cuda
from memfit.trace._shadow import ShadowValues
from memfit.trace._trace_notes import trace_notes
from memfit.trace._user_step import StepWatch, amp_as_on_cuda
from memfit.workload import (
    StepHooks,
    Workload,
    cast_inputs,
    engage,
    held_batch_sizes,
    optimizer_for,
    prepare_model,
    run_steps,
)

__all__ = ["REPEAT_STEPS", "Trace", "trace_workload"]

REPEAT_STEPS = True  # copy later steps from step 1 where it shows they are the same (_repeat)


@dataclass
class Trace:
    """The ordered allocation events of a workload, with what each allocation was."""

    events: list[MemoryEvent]
    infos: list[AllocationInfo]
    phases: list[tuple[str, int]]  # (phase name, index of its first event)
    steps_start: int  # index of the first event after setup (model and optimizer built)
    parameters: int
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    copied_steps: int = 0  # later steps copied from step 1's events (_repeat)
    copied_micro_batches: int = 0  # step 1's micro-batches copied from its second (_repeat)
    costs: StepCosts | None = None  # arithmetic and traffic by phase, when asked (_costs)
    traced_again: str | None = None  # why later steps were traced instead, if they were
    # FSDP2: a parameter whose dim 0 does not split evenly over the ranks (the last ranks'
    # shards are then smaller than rank 0's, and may allocate differently); ZeRO: always
    uneven_shards: bool = False
    # host memory the rank's offloaded FSDP2 shards and optimizer states take (0: none)
    host_memory: int = 0
    # events before which the traced code emptied the cache (``torch.cuda.empty_cache()``)
    empty_cache_at: tuple[int, ...] = ()
    # the calls whose kernels allocate by memfit's rules, when asked (``kernel_calls=True``)
    kernel_calls: KernelCalls | None = None
    # the batch sizes whose traces this one was derived from by a batch model (_batch_model),
    # its events never traced at its own batch size; () for a trace
    derived_from: tuple[int, ...] = ()


@contextmanager
def _optimizer_defaults_as_on_cuda() -> Iterator[None]:
    """Make torch.optim choose foreach/fused as it would for CUDA parameters.

    Each optimizer module imported ``_default_to_fused_or_foreach`` by name, so every module
    that holds it is patched, and restored on exit.
    """
    optim_mod: Any = importlib.import_module("torch.optim.optimizer")

    original = optim_mod._default_to_fused_or_foreach

    def as_on_cuda(params: list[Any], differentiable: bool, use_fused: bool = False) -> Any:
        if differentiable:
            return False, False
        fused = use_fused and all(p is None or torch.is_floating_point(p) for p in params)
        return fused, not fused

    holders: list[Any] = [
        module
        for name, module in list(sys.modules.items())
        if name.startswith("torch.optim")
        and module is not None
        and getattr(module, "_default_to_fused_or_foreach", None) is original
    ]
    for module in holders:
        module._default_to_fused_or_foreach = as_on_cuda
    supported = optim_mod._get_fused_kernels_supported_devices
    optim_mod._get_fused_kernels_supported_devices = lambda: [*supported(), "meta"]
    try:
        yield
    finally:
        for module in holders:
            module._default_to_fused_or_foreach = original
        optim_mod._get_fused_kernels_supported_devices = supported


class _EmulatedGradScaler:
    """GradScaler's memory on a GPU: a scale tensor, an in-place unscale, a found-inf flag."""

    def __init__(self) -> None:
        self.scale_t = torch.full((), 65536.0, device="meta")

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self.scale_t.to(loss.dtype)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        found_inf = torch.zeros((), device="meta")
        inv = self.scale_t.reciprocal()
        grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        if grads:
            torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv)
        del inv, found_inf
        optimizer.step()

    def update(self) -> None:
        pass


@contextmanager
def _empty_cache_recorded(recorder: Recorder) -> Iterator[None]:
    """``torch.cuda.empty_cache()`` called by the traced code is an event of the trace (no
    CUDA here, so torch's own would do nothing)."""
    saved = torch.cuda.empty_cache, torch.cuda.memory.empty_cache

    def empty_cache() -> None:
        recorder.empty_cache()

    torch.cuda.empty_cache = torch.cuda.memory.empty_cache = empty_cache
    try:
        yield
    finally:
        torch.cuda.empty_cache, torch.cuda.memory.empty_cache = saved


def _to_meta_with_shadow(shadows: ShadowValues, seen: list[str]) -> Any:
    def convert(t: Any, leaf: int) -> Any:
        if not isinstance(t, torch.Tensor) or t.device.type == "meta":
            return t
        # the layout ``t.to("cuda")`` gives: its strides if dense, else contiguous ones
        meta = torch.empty_like(t, device="meta")
        if t.requires_grad:
            meta.requires_grad_(True)
        if t.device.type == "cpu":  # the batch's own values, whatever their size
            shadows.set(meta, t, leaf)  # values of a user's CUDA tensor are not read: no GPU work
        return meta

    def to_device(batch: Any) -> Any:
        check_batch(batch)
        seen[:] = [describe_batch(batch)]  # a description: holding the batch would move frees
        shadows.batch_values = {}
        leaves, spec = tree_flatten(batch)
        return tree_unflatten([convert(t, i) for i, t in enumerate(leaves)], spec)

    return to_device


class _Session:
    """The state of one trace: the recorder, the module tracker, phases and attention kernels."""

    def __init__(self, gpu: GPU) -> None:
        self.shadows = ShadowValues()
        kernels = KernelModel(gpu.sm, sm_count=gpu.sm_count, threads_per_sm=gpu.threads_per_sm)
        self.recorder = Recorder(kernels, self.shadows)
        self.modules = ModuleTracker()
        self.recorder.module_of = self.modules.current
        self.phases: list[tuple[str, int]] = [("setup", 0)]
        self.backends: dict[str, int] = {}
        self.rnn_notes: set[str] = set()
        self.kernel_notes: set[str] = set()  # which CUDA kernel memfit assumed, where in doubt
        self.batch: list[str] = []  # what the last batch looked like, for error messages
        self.train = True
        self.user_autocast: set[str] = set()  # dtypes of the autocast regions user code entered
        self.repeat = StepRepeat(
            self.recorder,
            self.shadows,
            self.phases,
            self._set_phase,
            Tallies(self._tallies, self._add_tallies),
        )
        self.function_mode = TraceFunctionMode(
            gpu.sm,
            on_sdpa=self.on_sdpa,
            on_output=self.modules.stamp,
            fused_inplace=self.fused_inplace,
            rnn=RnnHooks(
                alloc=lambda n, label: self.recorder.alloc(n, Category.WORKSPACE, label),
                free=self.recorder.free,
                name=self.recorder.name,
                notes=self.rnn_notes,
                table=gpu.architecture.cudnn_table,
            ),
            ctc_loss=self._ctc_loss,
        )
        self.function_mode.notes = self.kernel_notes

    def _ctc_loss(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        note = cudnn_ctc_note(args, kwargs, self.recorder.fake_context)
        if note is not None:
            self.kernel_notes.add(note)

    def on_sdpa(self, backend: str) -> None:
        self.backends[backend] = self.backends.get(backend, 0) + 1

    def _tallies(self) -> dict[str, int]:
        counts = {f"attention {k}": n for k, n in self.backends.items()}
        counts["interpolated"] = self.recorder.kernels.convolutions.interpolated
        return counts

    def _add_tallies(self, delta: dict[str, int]) -> None:
        for key, n in delta.items():
            if key == "interpolated":
                self.recorder.kernels.convolutions.interpolated += n
            else:
                backend = key.removeprefix("attention ")
                self.backends[backend] = self.backends.get(backend, 0) + n

    def set_phase(self, name: str) -> None:
        self.repeat.phase(name)
        self._set_phase(name)

    def _set_phase(self, name: str) -> None:
        rec = self.recorder
        rec.phase = name
        if name.endswith(".forward"):
            rec.forward_first_info = len(rec.infos)
        rec.category_hint = Category.INPUT if name.endswith(".input") else None
        self.phases.append((name, len(rec.events)))

    @contextmanager
    def fused_inplace(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Iterator[None]:
        """An in-place foreach op: one fused kernel on CUDA, so its meta pieces are neither
        recorded as allocations nor counted as ops (the op itself is counted once)."""
        rec = self.recorder
        if rec.costs is not None and not rec.suspended:
            rec.costs.record_inplace_foreach(args, kwargs, rec.phase)
        self.recorder.suspended += 1
        try:
            yield
        finally:
            self.recorder.suspended -= 1

    def hooks(self) -> StepHooks:
        rec = self.recorder
        to_device = _to_meta_with_shadow(self.shadows, self.batch)

        def held_view(batch: Any) -> Any:  # a slice of the held batch (its blocks: _trace)
            with rec.host():
                return to_device(batch)

        return StepHooks(
            to_device=to_device,
            held_view=held_view,
            autocast=lambda dtype: _autocast.EmulatedAutocast("cuda", dtype),
            grad_scaler=_EmulatedGradScaler,
            phase=self.set_phase,
            after_backward=self._after_backward,
            after_optimizer=lambda opt: _mark_optimizer_state(rec, opt),
            around_param_step=self._param_step,
            repeat=lambda step, model: self.repeat.repeat(step, model, self.train),
            repeat_micro_batches=self.repeat.repeat_micro_batches,
        )

    def _param_step(self, param: Any, optimizer: Any, update: Callable[[], None]) -> None:
        """One parameter's update in backward (an optimizer stepped in backward): its gradient
        marked as such, its ops and allocations the optimizer phase's, its state marked."""
        rec = self.recorder
        owner = rec.param_owner.get(id(param))
        if param.grad is not None:
            rec.set_category(param.grad, Category.GRADIENT, force=True, module=owner)
        backward = rec.phase
        rec.phase = backward.rpartition(".")[0] + ".optimizer"  # not a phase of its own
        try:
            update()
        finally:
            rec.phase = backward
        for value in optimizer.state.get(param, {}).values():
            if isinstance(value, torch.Tensor):
                rec.set_category(value, Category.OPTIMIZER_STATE, force=True, module=owner)

    def _after_backward(self, model: nn.Module) -> None:
        _mark_grads(self.recorder, model)
        self.repeat.after_backward(model)

    @contextmanager
    def active(self) -> Iterator[None]:
        """Everything that makes the meta device behave like the target GPU, inner last."""
        _autocast.on_cached = lambda t: self.recorder.set_category(
            t, Category.AUTOCAST_CACHE, force=True
        )
        with ExitStack() as stack:
            stack.enter_context(library_caches_kept())
            stack.enter_context(_optimizer_defaults_as_on_cuda())
            stack.enter_context(flatten_like_cuda())
            stack.enter_context(_autocast.entry_points_emulated())
            stack.enter_context(meta_autocast_as_cuda())
            stack.enter_context(amp_as_on_cuda(self.user_autocast))
            stack.enter_context(_empty_cache_recorded(self.recorder))
            stack.enter_context(python_function_reentry())
            stack.enter_context(self.modules.active())
            stack.enter_context(self.function_mode)
            stack.enter_context(self.recorder)
            yield
        _autocast.on_cached = None


def trace_workload(
    workload: Workload,
    gpu: GPU,
    *,
    costs: bool = False,
    rank: int = 0,
    kernel_calls: bool = False,
) -> Trace:
    """Trace ``workload`` as it would run on ``gpu``. Never touches a real GPU. A model compiled
    as a whole is captured as inductor compiles it first, then traced with that plan. With
    ``costs``, each phase's arithmetic and memory traffic are counted too (``Trace.costs``);
    with ``kernel_calls``, the calls whose kernels allocate by memfit's rules are logged
    (``Trace.kernel_calls``: what a batch model needs of a trace)."""
    start = time.perf_counter()
    try:
        trace = _trace(workload, gpu, None, start, costs, rank, kernel_calls)
    except CaptureNeeded:
        for technique, value in active_techniques(workload):
            refusal = technique.refusal_compiled(value)
            if refusal is not None:
                raise InvalidInputError(refusal) from None
        plan = capture_compiled(workload, gpu)
    else:
        if workload.activation_memory_budget is not None:  # nothing was compiled
            raise InvalidInputError(
                f"activation_memory_budget={workload.activation_memory_budget!r} would be "
                f"ignored: {workload.name}'s step compiles nothing, and the budget is "
                "torch.compile's (what a compiled model's forward saves). Drop it; for an "
                "eager model, activation_checkpointing=True, 'selective' or a share of the "
                "blocks saves memory the same way."
            )
        return trace
    # the first run with a warm inductor cache (nothing timed: the kernels' configs and the
    # padding of matmuls are cached) and with a cold one (each triton kernel times its candidate
    # configurations at its first call, and pad_mm times the matmuls it could pad), and a cold
    # one that finds the padding decided (the H200 ran that mix: GPT-2 at a budget of 0.5): any
    # may reserve more, and a job meets them, so the estimate is the one that reserves most
    warm = _trace(
        workload, gpu, dataclasses.replace(plan, pad_benchmarks=[]), start, costs, 0, kernel_calls
    )
    tuned, padded = any(plan.tuning.values()), bool(plan.pad_benchmarks)
    colds = []
    if tuned or padded:
        colds.append(
            _trace(workload, gpu, dataclasses.replace(plan, tune_kernels=True), start, costs)
        )
    if tuned and padded:
        tuned_only = dataclasses.replace(plan, tune_kernels=True, pad_benchmarks=[])
        colds.append(_trace(workload, gpu, tuned_only, start, costs))
    trace, colder = first_run_reserving_most(warm, colds, workload.allocator)
    if trace.kernel_calls is not None:  # no batch model: inductor plans its buffers per shape
        trace.kernel_calls.compiled = True
    trace.notes[:0] = [
        *compiled_notes(plan, torch.__version__, workload.activation_memory_budget is not None),
        *([COLD_CACHE_NOTE] if colder else []),
    ]
    return trace


def _trace(
    workload: Workload,
    gpu: GPU,
    plan: CompiledPlan | None,
    start: float,
    costs: bool = False,
    rank: int = 0,
    kernel_calls: bool = False,
) -> Trace:
    """One trace of ``workload``; a compiled model is replayed with ``plan``."""
    if workload.mode == "train":  # a loss backward cannot run on is refused with its value
        workload = dataclasses.replace(workload, loss_fn=checked_loss(workload.loss_fn))
    session = _Session(gpu)
    session.train = workload.mode == "train"
    if costs:
        session.recorder.costs = StepCosts(compiled=plan is not None)
    if kernel_calls:
        session.recorder.calls = KernelCalls.of(session.recorder.kernels)
    # later steps are copies of step 1 in memfit's own loop (a user's step or a compiled model's
    # may differ from one step to the next)
    # (and DDP's: its reducer may rebuild its gradient buckets after the first backward)
    held = held_batch_sizes(workload)  # before the batches are watched for repeats
    session.repeat.enabled = (
        REPEAT_STEPS and workload.step_fn is None and plan is None and workload.strategy is None
    )
    if session.repeat.enabled:
        make = session.repeat.batches(
            workload.make_batch,
            lambda batch: tree_flatten(cast_inputs(batch, workload.param_dtype))[0],
        )
        workload = dataclasses.replace(workload, make_batch=make)
    session.shadows.routing.policy = workload.moe_routing or "loaded"
    recorder = session.recorder
    model: nn.Module | None = None
    on_host = False
    host = (0, 0, 0)  # what the offloaded shards hold on the host (data_parallel.host_bytes)
    place = TracedHost(recorder)
    compile_guard = CompileGuard(workload, lambda: recorder.phase, plan)
    group = parallel_group(workload.strategy, workload.world_size, "meta", rank)
    with group as streams, session.active(), compile_guard.active(), ExitStack() as sharded:
        try:
            building = sharded_build(workload, streams, recorder, sharded)  # FSDP2: off the GPU
            model = compile_guard.checked_model(prepare_model(workload, "meta", building))
            claim_buffers(workload, streams, recorder, model)
            _mark_model(recorder, model)
            session.modules.name_modules(model)
            optimizer = optimizer_for(workload, model)
            model, optimizer = engage(workload, model, optimizer, place)
            on_host = offloaded_optimizer(workload, recorder, model, optimizer)
            steps_start = len(recorder.events)
            session.phases.append(("steps", steps_start))
            for nbytes in held:  # the caller's batch: alive through every step, never freed
                recorder.alloc(nbytes, Category.INPUT, "batch held by the caller")
            # after the model's imports: what they loaded (transformers, on a first build) is
            # patched too
            with generation_observed(session.shadows.generation), meta_autocast_as_cuda():
                _run_with_activation_marks(workload, model, optimizer, session.hooks(), recorder)
        except (MemfitError, MemoryError):
            raise
        except Exception as exc:
            batch = session.batch[0] if session.batch else None
            if batch is not None and workload.step_fn is not None:  # the step calls the model
                batch = batch.partition(" (called as")[0] + " (passed to the step function)"
            raise _explain(
                exc, recorder.phase, recorder.failure, recorder.module_of(), model, batch
            ) from exc
        unique = {id(p): p for p in model.parameters()}
        parameters = sum(p.numel() for p in unique.values())
        uneven = uneven_shards(workload, list(unique.values()))
        if recorder.costs is not None:  # the optimizer's host time grows with them
            recorder.costs.parameter_tensors = sum(p.requires_grad for p in unique.values())
        if on_host:
            host = host_bytes(model, optimizer)
        technique_host, technique_notes = _techniques_after(workload, optimizer)
        del model, optimizer
    notes = compile_guard.finish() + rank_notes(workload) + technique_notes
    notes += [shards_note(*host)] if on_host else []
    notes += trace_notes(workload, session, place.lanes, sum(held))
    # what happens after the last step (the model torn down) is not part of the workload
    phases = session.phases
    end = next((i for name, i in reversed(phases) if name == "end"), len(recorder.events))
    return Trace(
        recorder.events[:end],
        recorder.infos,
        phases,
        steps_start,
        parameters,
        notes,
        time.perf_counter() - start,
        copied_steps=session.repeat.copied,
        copied_micro_batches=session.repeat.copied_micro_batches,
        traced_again=session.repeat.refused,
        costs=session.recorder.costs,
        uneven_shards=uneven,
        host_memory=sum(host) + technique_host,
        empty_cache_at=tuple(i for i in recorder.empty_cache_at if i < end),
        kernel_calls=recorder.calls,
    )


def _techniques_after(workload: Workload, optimizer: Any) -> tuple[int, list[str]]:
    """What the workload's techniques hold on the host once the steps ran, and their notes."""
    host, notes = 0, []
    for technique, value in active_techniques(workload):
        host += technique.host_bytes(value, optimizer)
        notes += technique.notes(value, workload, optimizer)
    return host, notes


def _run_with_activation_marks(
    workload: Workload, model: nn.Module, optimizer: Any, hooks: StepHooks, recorder: Recorder
) -> None:
    """Run the steps; what the forward made and is still alive when backward starts was saved."""
    inner_phase = hooks.phase

    def phase(name: str) -> None:
        if name.endswith(".backward"):
            recorder.mark_live_since(recorder.forward_first_info, Category.ACTIVATION)
        inner_phase(name)

    hooks.phase = phase
    if workload.step_fn is None:
        run_steps(workload, model, optimizer, hooks)
        return
    watch = StepWatch(
        phase,
        lambda: recorder.phase,
        lambda: _mark_grads(recorder, model),
        lambda opt: _mark_optimizer_state(recorder, opt),
    )
    with watch.active():
        run_steps(workload, model, optimizer, hooks)
    if workload.mode == "train" and watch.backward_calls == 0:
        raise InvalidInputError(
            "The step function ran no backward pass, yet mode='train': a training step "
            "computes gradients (loss.backward()), else it keeps no activations, gradients or "
            "optimizer state and its memory is an inference step's. Call backward in the "
            "step, or estimate it with mode='infer' and step_fn(model, batch)."
        )


def _owner(name: str) -> str:
    return name.rpartition(".")[0] or "(model)"


def _mark_model(recorder: Recorder, model: nn.Module) -> None:
    owners = recorder.param_owner
    for name, p in model.named_parameters():
        owners[id(p)] = _owner(name)
        recorder.set_category(p, Category.PARAMETER, force=True, module=owners[id(p)])
        for held in vars(p).values():  # a quantized weight's own state (LLM.int8's row scales)
            if isinstance(held, torch.Tensor) and held is not p:
                recorder.set_category(held, Category.PARAMETER, force=True, module=owners[id(p)])
    for name, b in model.named_buffers():
        recorder.set_category(b, Category.BUFFER, force=True, module=_owner(name))


def _mark_grads(recorder: Recorder, model: nn.Module) -> None:
    for p in model.parameters():
        if p.grad is not None:
            recorder.set_category(
                p.grad, Category.GRADIENT, force=True, module=recorder.param_owner.get(id(p))
            )


def _mark_optimizer_state(recorder: Recorder, optimizer: torch.optim.Optimizer) -> None:
    for param, state in optimizer.state.items():
        owner = recorder.param_owner.get(id(param))
        for value in state.values():
            if isinstance(value, torch.Tensor):
                recorder.set_category(value, Category.OPTIMIZER_STATE, force=True, module=owner)
