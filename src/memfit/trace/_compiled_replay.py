"""Replay a compiled model's wrappers (:class:`memfit.trace._compiled_capture.CompiledPlan`) in
the trace: the model's call runs inductor's generated ``call`` functions on meta tensors, so the
recorder sees the buffers the GPU would allocate, reuse and free, in its order.

The generated code is run as written, with the GPU's pieces made harmless: ``empty_strided_cuda``
makes a meta tensor, triton kernels do nothing (a kernel writes into buffers that exist
already), extern kernels (cuBLAS matmuls into ``out=``) and fallback ops (cuDNN attention) run
on meta tensors under the recorder as in an eager trace, with their workspaces. The forward's
outputs past the call's own are what the backward needs: an autograd function holds them from
the forward to the backward, which takes them over (the wrapper frees each after its last use,
as on the GPU) and returns the parameters' gradients.

With a cold inductor cache (``CompiledPlan.tune_kernels``) each triton kernel that has several
configs times them at its first call, allocating clones and L2 flush buffers; a warm cache does
not. Either run may reserve more (the segments the transients leave decide it):
:func:`first_run_reserving_most` picks the one an estimate must cover.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any, Protocol, TypeVar

import torch
from torch import nn
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
from torch.utils._pytree import tree_flatten, tree_unflatten

from memfit._errors import UnsupportedWorkloadError
from memfit._events import MemoryEvent
from memfit.allocator import AllocatorConfig, AllocatorReplay, Recording, ReplayOps
from memfit.technique.compilation import memory_budget_words
from memfit.trace._compiled_capture import CompiledPlan
from memfit.trace._inductor import L2_FLUSH_BYTES, KernelTuning, PadBenchmark, kernel_traffic

__all__ = [
    "BUDGET_RESERVED_NOTE",
    "COLD_CACHE_NOTE",
    "CompiledReplay",
    "compiled_notes",
    "first_run_reserving_most",
]

_CALL = re.compile(r"^( *)def call\((?:self, )?args\):\n", re.M)


class _Kernel:
    """A triton kernel of the wrapper: it writes into buffers, it allocates nothing. Its
    traffic (each argument's bytes times ``weights``: :func:`kernel_traffic`) is counted as
    one ``mem:fused`` op where the trace counts costs."""

    def __init__(self, weights: tuple[int, ...] = ()) -> None:
        self.weights = weights

    def run(self, *args: Any, **kwargs: Any) -> None:
        _count_kernel(self.weights, args)

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        return self.run(*args, **kwargs)


def _count_kernel(weights: tuple[int, ...], args: tuple[Any, ...]) -> None:
    """Count one triton kernel's traffic with the trace's recorder, if it counts costs."""
    for mode in reversed(_get_current_dispatch_mode_stack()):
        record = getattr(mode, "record_kernel", None)
        if record is not None:
            moved = [
                (a, weights[i] if i < len(weights) else 1)
                for i, a in enumerate(args)
                if isinstance(a, torch.Tensor)
            ]
            record("fused", moved)
            return


class _TunedKernel(_Kernel):
    """A triton kernel that times its configs at its first call (a cold inductor cache,
    :class:`memfit.trace._inductor.KernelTuning`): per config, a warm-up run on clones of the
    arguments it writes, then the L2 flush buffer and the timed runs, each on fresh clones
    (one is shown: the next takes the block the last one freed), the flush freed."""

    def __init__(self, tuning: KernelTuning, weights: tuple[int, ...] = ()) -> None:
        super().__init__(weights)
        self.tuning = tuning
        self.timed = False

    def run(self, *args: Any, **kwargs: Any) -> None:
        _count_kernel(self.weights, args)
        if self.timed:
            return None
        self.timed = True
        written = [a for i, a in enumerate(args) if i in self.tuning.mutated]
        written = [a for a in written if isinstance(a, torch.Tensor)]
        for _ in range(self.tuning.configs):
            clones = [_clone(t) for t in written]  # the warm-up
            del clones
            flush = _empty((L2_FLUSH_BYTES,), torch.uint8)
            clones = [_clone(t) for t in written]  # the timed runs
            del clones, flush
        return None


def _clone(t: torch.Tensor) -> torch.Tensor:
    """What the autotuner's clone of a written argument allocates: its whole span, strides kept
    (``clone_preserve_strides``)."""
    return _realized((tuple(t.shape), tuple(t.stride()), t.dtype))


class _Namespace(dict[str, Any]):
    """The wrapper's globals: checks (``assert_*``) and kernels (``triton_*``) the wrapper's
    module would define do nothing here (but count their traffic, ``traffic``)."""

    def __init__(self, names: dict[str, Any], traffic: dict[str, tuple[int, ...]]) -> None:
        super().__init__(names)
        self.traffic = traffic

    def __missing__(self, name: str) -> Any:
        if name.startswith("assert_"):
            return lambda *args, **kwargs: None
        if name.startswith("triton_"):
            return _Kernel(self.traffic.get(name, ()))
        raise KeyError(name)


def _reinterpret(base: torch.Tensor, size: Any, stride: Any, offset: int) -> torch.Tensor:
    return base.as_strided(size, stride, base.storage_offset() + offset)


def wrapper_call(
    source: str, tuning: dict[str, KernelTuning] | None = None
) -> Callable[[list[Any]], list[Any]]:
    """The ``call(args)`` of an inductor wrapper, runnable on meta tensors; the kernels named
    in ``tuning`` time their configs at their first call (a cold inductor cache)."""
    match = _CALL.search(source)
    if match is None:
        raise UnsupportedWorkloadError("inductor's wrapper has no call(args) function")
    indent = len(match.group(1))
    lines: list[str] = []
    for line in source[match.end() :].splitlines():
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        lines.append(line)
    body = textwrap.dedent("\n".join(lines))
    body = body.replace("torch.cuda._DeviceGuard(0)", "_nullcontext()")
    body = re.sub(r"^(\s*)torch\.cuda\.set_device\(\d+\)$", r"\1pass", body, flags=re.M)
    code = "def call(args):\n" + textwrap.indent(body, "    ")
    traffic = kernel_traffic(source)
    from torch._inductor.select_algorithm import extern_kernels

    namespace: dict[str, Any] = _Namespace(
        {
            "torch": torch,
            "aten": torch.ops.aten,
            "extern_kernels": extern_kernels,
            "_nullcontext": nullcontext,
            "empty_strided_cuda": lambda size, stride, dtype: torch.empty_strided(
                size, stride, dtype=dtype, device="meta"
            ),
            "empty_strided_cpu": lambda size, stride, dtype: torch.empty_strided(
                size, stride, dtype=dtype, device="cpu"
            ),
            "empty_strided_cpu_pinned": lambda size, stride, dtype: torch.empty_strided(
                size, stride, dtype=dtype, device="cpu"
            ),
            "reinterpret_tensor": _reinterpret,
            "get_raw_stream": lambda index: 0,
            "copy_if_misaligned": lambda t: t,
        },
        traffic,
    )
    namespace.update(
        {name: _TunedKernel(t, traffic.get(name, ())) for name, t in (tuning or {}).items()}
    )
    exec(compile(code, "<inductor wrapper>", "exec"), namespace)
    call: Callable[[list[Any]], list[Any]] = namespace["call"]
    return call


class _Region(torch.autograd.Function):
    """The compiled graph as one autograd node: forward runs the forward wrapper, backward the
    backward wrapper on what the forward saved and the output gradients."""

    @staticmethod
    def forward(ctx: Any, replay: CompiledReplay, *inputs: torch.Tensor) -> Any:
        outs = list(replay.forward_call(list(inputs)))
        user = replay.plan.user_outputs
        ctx.replay = replay
        ctx.held = outs[user:]  # what the backward needs, taken over by it
        ctx.inputs = len(inputs)
        del outs[user:]
        kept = [o for i, o in enumerate(outs) if i not in replay.plan.tangents]
        ctx.mark_non_differentiable(*[o for o in kept if isinstance(o, torch.Tensor)])
        return tuple(outs)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        replay: CompiledReplay = ctx.replay
        args = ctx.held
        ctx.held = None
        args.extend(grads[i] for i in replay.plan.tangents)
        del grads
        assert replay.backward_call is not None
        out = list(replay.backward_call(args))
        return (None, *out[: ctx.inputs])


class CompiledReplay(nn.Module):
    """The meta model, called as its compiled graph runs on the GPU."""

    def __init__(self, model: nn.Module, plan: CompiledPlan) -> None:
        super().__init__()
        self.inner = model
        self.plan = plan
        self._compiled = False  # the first call compiles: pad_mm times its matmuls then
        tuning = plan.tuning if plan.tune_kernels else {}
        self.forward_call = wrapper_call(plan.forward, tuning.get("forward"))
        self.backward_call = (
            wrapper_call(plan.backward, tuning.get("backward")) if plan.backward else None
        )
        named: dict[str, torch.Tensor] = dict(model.named_parameters(remove_duplicate=False))
        named.update(model.named_buffers())
        self._named = named

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        leaves, spec = tree_flatten((args, kwargs))
        if spec != self.plan.call_spec:
            raise UnsupportedWorkloadError(
                "the compiled model is called with other arguments than when it was captured; "
                "pass compiled='eager' (--compiled eager)."
            )
        inputs = [
            self._named[key] if kind != "arg" else leaves[key] for kind, key in self.plan.inputs
        ]
        del leaves
        if not self._compiled:
            self._compiled = True
            for benchmark in self.plan.pad_benchmarks:
                self._time_padding(benchmark)
        if torch.is_grad_enabled() and self.backward_call is not None:
            outs = _Region.apply(self, *inputs)
        else:
            outs = self.forward_call(inputs)[: self.plan.user_outputs]
        values = [outs[key] if kind == "out" else key for kind, key in self.plan.output_leaves]
        return tree_unflatten(values, self.plan.output_spec)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["inner"], name)

    def _time_padding(self, bench: PadBenchmark) -> None:
        """What pad_mm's timing of one matmul it could pad allocates during the first compile,
        padded in the end or not (H200 traces, torch 2.11): its inputs made real, a first
        unpadded run (the timing stream's cuBLAS workspace appears, and stays), the timed runs
        between L2 flushes, then the padded runs, each padding its inputs and making a padded
        output."""
        dtype = bench.mat1[2]
        lead = bench.mat1[0][:-2]
        m, k = bench.mat1[0][-2:]
        n = bench.mat2[0][-1]
        pm, pk, pn = bench.padding
        inputs = [_realized(bench.mat1), _realized(bench.mat2)]
        if bench.bias is not None:
            inputs.append(_realized(bench.bias))
        if bench.pre_padded[0] and (pm or pk):
            inputs.append(_empty((*lead, m + pm, k + pk), dtype))
        if bench.pre_padded[1] and (pk or pn):
            inputs.append(_empty((*lead, k + pk, n + pn), dtype))
        # the first run is the matmul itself: cuBLAS takes the thread's workspace (the
        # recorder's rule), which stays
        out = _run(bench, inputs)
        del out
        # the unpadded runs timed; the padded matmul's first run, then its timed runs
        for padded, flushed in ((False, True), (True, False), (True, True)):
            flush = _empty((L2_FLUSH_BYTES,), torch.uint8) if flushed else None
            made = []
            if padded and not bench.pre_padded[0] and (pm or pk):
                made.append(_empty((*lead, m + pm, k + pk), dtype))
            if padded and not bench.pre_padded[1] and (pk or pn):
                made.append(_empty((*lead, k + pk, n + pn), dtype))
            made.append(_empty((*lead, m + pm, n + pn) if padded else (*lead, m, n), dtype))
            del made, flush
        del inputs


def _run(bench: PadBenchmark, inputs: list[torch.Tensor]) -> torch.Tensor:
    """The unpadded matmul on the realized inputs, viewed with their shapes and strides."""
    mat1 = inputs[0].as_strided(bench.mat1[0], bench.mat1[1])
    mat2 = inputs[1].as_strided(bench.mat2[0], bench.mat2[1])
    if bench.op == "bmm":
        return torch.bmm(mat1, mat2)
    if bench.op == "addmm" and bench.bias is not None:
        bias = inputs[2].as_strided(bench.bias[0], bench.bias[1])
        return torch.addmm(bias, mat1, mat2)
    return torch.mm(mat1, mat2)


def _empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def _realized(meta: tuple[tuple[int, ...], tuple[int, ...], torch.dtype]) -> torch.Tensor:
    """A real tensor of the shape and stride pad_mm times on: its storage's whole span."""
    shape, stride, dtype = meta
    span = 1 + sum((d - 1) * s for d, s in zip(shape, stride, strict=True)) if shape else 1
    return torch.empty((span,), dtype=dtype, device="meta")


def compiled_notes(plan: CompiledPlan, version: str, budget_given: bool) -> list[str]:
    """What the estimate of a compiled model assumed, in words (``budget_given``: the
    workload named the activation memory budget, else the process's setting was used)."""
    attention = ", ".join(f"{n} x {b}" for b, n in sorted(plan.attention.items()))
    budget = plan.memory_budget
    return [
        "the model is compiled with torch.compile: this is the compiled step as inductor "
        f"(torch {version}) lowers it for this GPU, its buffers, their reuse and what its "
        "forward saves; a GPU host with another torch version compiles another step",
        *([f"compiled attention ran {attention}"] if attention else []),
        *([memory_budget_words(budget, budget_given)] if budget < 1 or budget_given else []),
        *([BUDGET_RESERVED_NOTE] if budget < 1 else []),
    ]


BUDGET_RESERVED_NOTE = (
    "below an activation memory budget of 1 a compiled step's first run reserves less "
    "predictably: on an H200 (torch 2.11) a compiled GPT-2 at a budget of 0.5 reserved 6.62 GiB "
    "in one fresh run and 6.91 GiB in another, against 6.71 GiB estimated; leave a few percent "
    "of headroom"
)


class _Traced(Protocol):
    """What :func:`first_run_reserving_most` reads of a trace."""

    events: list[MemoryEvent]
    steps_start: int


_T = TypeVar("_T", bound=_Traced)

COLD_CACHE_NOTE = (
    "the first run of the compiled model with a cold inductor cache reserves the most: its "
    "first call times each Triton kernel's configs (clones and L2 flush buffers); a run that "
    "finds the tuned kernels cached reserves less"
)


def first_run_reserving_most(
    warm: _T, colds: Sequence[_T], config: AllocatorConfig
) -> tuple[_T, bool]:
    """Of a compiled model's first runs (with a warm inductor cache, and with cold ones), the
    one whose steps reserve the most, and whether it is a cold one. Which is higher depends on
    where the first call's tuning transients leave segments, not on their sizes: measured on
    the H200 (torch 2.11,
    benchmarks/results/2026-12-01-h200-compiled-accumulation-step-times/heldout-compiled), a
    cold cache reserved 0.43% more than a warm one for a compiled GPT-2, 3.9% less for a ResNet-50
    and 0.2% less for a ViT-S/16. A job meets them (its first run, then the next ones): the
    estimate must hold for each."""
    best, colder = warm, False
    most = _steps_reserved(warm, config)
    for cold in colds:
        reserved = _steps_reserved(cold, config)
        if reserved > most:
            best, colder, most = cold, True, reserved
    return best, colder


def _steps_reserved(trace: _Traced, config: AllocatorConfig) -> int:
    """The steps' peak reserved, replayed as the estimate replays them (the cache emptied where
    the steps start)."""
    reserved: list[int] = []
    run = AllocatorReplay(config)
    ops = ReplayOps.from_events(trace.events, empty_cache_before=trace.steps_start)
    run.run(ops, record=Recording([], reserved))
    return max(reserved[trace.steps_start :], default=0)
