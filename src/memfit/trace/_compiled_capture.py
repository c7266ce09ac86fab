"""A ``torch.compile``'d model's step as inductor would run it on the GPU: captured on fake CPU
tensors, partitioned, and lowered for CUDA (:mod:`memfit.trace._inductor`).

The capture runs the workload's own first step (forward, the loss, backward; or the user's step
function, up to its first backward: :mod:`memfit.trace._compiled_user_step`) on a twin of the
model whose parameters are fake CPU tensors (no memory): fake *meta* tensors lose the loss's
backward, and fake CUDA tensors stop in autograd's engine without a device. Dynamo hands the
graph to inductor's ``compile_fx`` with a recording ``inner_compile``: inductor's own joint
passes and min-cut partitioner decide what the forward saves, and each partitioned graph is
then lowered for CUDA. What differs on a CPU is put back as on the GPU: CUDA autocast runs as
CPU autocast of the same dtype (the same casts for the models checked), and SDPA calls the
kernel the target GPU picks (:func:`memfit.trace._sdpa.choose_backend`).

The result, a :class:`CompiledPlan`, says which parameter, buffer or call argument each graph
input is, how the call's output is rebuilt from the forward's outputs, and carries the two
wrappers' sources; :mod:`memfit.trace._compiled_replay` runs them in the trace.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._pytree import TreeSpec, tree_flatten, tree_map

from memfit._errors import MemfitError, UnsupportedWorkloadError
from memfit._gpus import GPU
from memfit.technique.compilation import compiled_with_budget, eager_view
from memfit.trace._compiled_user_step import (
    StepCaptured,
    autocast_dtype,
    run_user_step,
    step_on_fake_cpu,
)
from memfit.trace._inductor import (
    KernelTuning,
    PadBenchmark,
    answering_as,
    first_call_tuning,
    lower_for_cuda,
    recording_pad_benchmarks,
)
from memfit.trace._library_autocast import maybe_autocast_traceable
from memfit.trace._sdpa import choose_backend
from memfit.workload import Workload, call_model, cast_inputs, prepare_model

__all__ = ["CompiledPlan", "capture_compiled"]


@dataclass
class CompiledPlan:
    """One compiled graph (a forward and, in training, its backward) ready to replay."""

    inputs: list[tuple[str, Any]]  # ("param" | "buffer", name) or ("arg", flat position)
    call_spec: TreeSpec  # of the module call's (args, kwargs)
    output_spec: TreeSpec  # of what the call returns
    output_leaves: list[tuple[str, Any]]  # ("out", forward output index) or ("const", value)
    forward: str  # the forward wrapper's source
    backward: str | None  # the backward's; None in inference
    user_outputs: int  # the forward's outputs that are the call's; the rest are saved
    tangents: list[int] = field(default_factory=list)  # user outputs the backward takes
    attention: dict[str, int] = field(default_factory=dict)
    pad_benchmarks: list[PadBenchmark] = field(default_factory=list)
    # the Triton kernels that time their configs at their first call, by wrapper ("forward",
    # "backward") and name; replayed only with ``tune_kernels`` (a cold inductor cache)
    tuning: dict[str, dict[str, KernelTuning]] = field(default_factory=dict)
    tune_kernels: bool = False
    memory_budget: float = 1.0  # torch's activation memory budget the partitioner had


class _Capture:
    """What the recording backend sees: the graph's inputs, the partitioned graphs."""

    def __init__(self) -> None:
        self.examples: list[Any] = []
        self.graphs: list[tuple[bool, torch.fx.GraphModule, Any]] = []
        self.graph_outputs: list[int] = []
        self.calls = 0

    def backend(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        from torch._inductor.compile_fx import compile_fx

        self.calls += 1
        self.examples = [
            getattr(node.meta.get("grapharg"), "example", None)
            for node in gm.graph.nodes
            if node.op == "placeholder"
        ]
        compiled: Any = compile_fx(gm, example_inputs, inner_compile=self.inner)

        def run(*args: Any) -> Any:
            outs = compiled(*args)
            self.graph_outputs = [id(o) for o in outs]  # what the call's output is built of
            return outs

        if getattr(compiled, "_boxed_call", False):
            run._boxed_call = True  # type: ignore[attr-defined]
        return run

    def inner(self, gm: torch.fx.GraphModule, example_inputs: Any, **kwargs: Any) -> Any:
        context = torch._guards.TracingContext.try_get()
        metadata = getattr(context, "fw_metadata", None)
        is_backward = bool(kwargs.get("is_backward"))
        self.graphs.append((is_backward, gm, metadata))
        run = gm.forward

        def boxed(args: list[Any]) -> Any:
            outs = run(*args)
            args.clear()
            return outs

        boxed._boxed_call = True  # type: ignore[attr-defined]
        return boxed


def capture_compiled(workload: Workload, gpu: GPU) -> CompiledPlan:
    """Capture and lower the compiled model's step of ``workload`` for ``gpu``."""
    import torch._dynamo
    from torch._subclasses.fake_tensor import FakeTensorMode

    capture = _Capture()
    attention: dict[str, int] = {}
    torch._dynamo.reset()  # a cached frame would not reach the backend
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    try:
        twin = _twin(workload, fake)
        with fake:
            made = cast_inputs(workload.make_batch(), workload.param_dtype)
            batch = tree_map(_tensor_on_cpu, made)
        names = {id(p): ("param", n) for n, p in twin.named_parameters(remove_duplicate=False)}
        names.update({id(b): ("buffer", n) for n, b in twin.named_buffers()})
        compiled: Any = torch.compile(twin, backend=capture.backend, fullgraph=True)
        shim = _Shim(compiled)
        benchmarks: list[PadBenchmark] = []
        timing, switches = recording_pad_benchmarks(benchmarks), maybe_autocast_traceable()
        kernels = _cuda_attention(gpu.sm, attention, workload.autocast_dtype)
        budget = compiled_with_budget(workload.activation_memory_budget)
        with budget as memory_budget, fake, answering_as(gpu), kernels, timing, switches:
            _run_step(workload, shim, batch)
        plan = _plan(capture, names, shim)
        with answering_as(gpu):
            forward, backward = _lowered(capture, False), _lowered(capture, True)
            assert forward is not None
            tuning = {"forward": first_call_tuning(forward)}
            if backward is not None:
                tuning["backward"] = first_call_tuning(backward)
        plan = dataclasses.replace(
            plan,
            forward=forward,
            backward=backward,
            attention=attention,
            pad_benchmarks=benchmarks,
            tuning=tuning,
            memory_budget=memory_budget,
        )
    except MemfitError:
        raise
    except Exception as exc:
        raise UnsupportedWorkloadError(
            f"memfit could not capture the compiled model {workload.name} as inductor would "
            f"compile it ({type(exc).__name__}: {_first_line(exc)}). "
            "Compiled estimates are made for whole models compiled with torch.compile that "
            "compile to one graph; pass compiled='eager' (--compiled eager) to estimate the "
            "uncompiled step instead, usually more than the compiled one takes."
        ) from exc
    finally:
        torch._dynamo.reset()
    return plan


def _twin(workload: Workload, fake: Any) -> nn.Module:
    """The model built with fake CPU parameters (float32, then cast as ``_on_cpu`` says).
    A model whose construction reads a value (timm's ViT: ``linspace(...).item()`` for its
    drop-path rates) cannot be built under the fake mode: it is built on meta instead, where
    tensors it makes on the CPU are real, and then moved to the fake CPU."""
    from torch._subclasses.fake_tensor import DataDependentOutputException

    float32 = dataclasses.replace(workload, precision="fp32")
    try:
        with fake:
            return _on_cpu(eager_view(prepare_model(float32, "cpu")), workload.param_dtype)
    except MemfitError as exc:  # the user's factory raised: memfit says so, with the cause
        if not isinstance(exc.__cause__, DataDependentOutputException):
            raise
        model = eager_view(prepare_model(float32, "meta"))
    with fake:
        return _on_cpu(model, workload.param_dtype)


def _tensor_on_cpu(value: Any, force: bool = False) -> Any:
    """A tensor built elsewhere (a user's model is cloned on meta) as a fake CPU tensor."""
    if not isinstance(value, torch.Tensor) or (value.device.type == "cpu" and not force):
        return value
    return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="cpu")


def _on_cpu(module: nn.Module, dtype: torch.dtype, made: dict[int, Any] | None = None) -> nn.Module:
    """A copy of ``module``'s tree with every parameter and buffer on the (fake) CPU; tied
    ones stay tied, shared modules shared; floating ones in ``dtype`` (pure low precision:
    ``Module.to`` cannot swap fake tensors). The given modules are not changed (a factory
    may return the user's own object)."""
    made = {} if made is None else made
    if id(module) in made:
        return made[id(module)]  # type: ignore[no-any-return]
    twin = copy.copy(module)
    made[id(module)] = twin

    def moved(value: Any, parameter: bool) -> Any:
        if value is None:
            return None
        if id(value) not in made:
            tensor = _tensor_on_cpu(value, force=True)
            if tensor.is_floating_point() and dtype != torch.float32:
                tensor = torch.empty_strided(tensor.shape, tensor.stride(), dtype=dtype)
            keep_grad = parameter and value.requires_grad
            made[id(value)] = nn.Parameter(tensor, requires_grad=keep_grad) if parameter else tensor
        return made[id(value)]

    twin._parameters = {n: moved(p, True) for n, p in module._parameters.items()}
    twin._buffers = {n: moved(b, False) for n, b in module._buffers.items()}
    twin._modules = {
        n: (_on_cpu(child, dtype, made) if child is not None else None)
        for n, child in module._modules.items()
    }
    return twin


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else "no message"


class _Shim(nn.Module):
    """The compiled twin, with the flat arguments and the output of each call remembered. In
    a user's step (``user_step``), the compiled call runs with the step's device mode lifted,
    and a call without gradients is all the capture needs (the step is stopped there)."""

    def __init__(self, compiled: nn.Module) -> None:
        super().__init__()
        self.compiled = compiled
        self.call_leaves: list[Any] = []
        self.call_spec: TreeSpec | None = None
        self.outputs: list[Any] = []
        self.user_step: Callable[[], Any] | None = None

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        self.call_leaves, self.call_spec = tree_flatten((args, kwargs))
        if self.user_step is None:
            self.outputs.append(self.compiled(*args, **kwargs))
            return self.outputs[-1]
        with self.user_step():
            self.outputs.append(self.compiled(*args, **kwargs))
        if not torch.is_grad_enabled():  # an inference graph: no backward to wait for
            raise StepCaptured
        return self.outputs[-1]

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["compiled"], name)


def _run_step(workload: Workload, shim: _Shim, batch: Any) -> None:
    """The workload's forward (and loss and backward in training), as its first step runs;
    a user's step until the graphs are captured (:mod:`memfit.trace._compiled_user_step`)."""
    dtype = workload.autocast_dtype
    region = torch.autocast("cpu", dtype=dtype) if dtype is not None else nullcontext()
    if workload.step_fn is not None:
        with step_on_fake_cpu() as lifted:
            shim.user_step = lifted
            run_user_step(workload, shim, batch)
    elif workload.mode == "infer":
        with torch.no_grad(), region:
            (workload.forward_fn or call_model)(shim, batch)
    else:
        with region:
            loss = workload.loss_fn(shim, batch)
        loss.backward()
    if len(shim.outputs) != 1 and workload.step_fn is not None:
        raise UnsupportedWorkloadError(
            f"the step function called the compiled model {len(shim.outputs)} times before "
            "its first backward; compiled estimates take one call, then its backward (later "
            "calls, such as micro-batches, are fine). Pass compiled='eager' (--compiled eager)."
        )
    if len(shim.outputs) != 1:
        raise UnsupportedWorkloadError(
            f"the compiled model was called {len(shim.outputs)} times in one step; compiled "
            "estimates take one call per step. Pass compiled='eager' (--compiled eager)."
        )


def _plan(capture: _Capture, names: dict[int, tuple[str, str]], shim: _Shim) -> CompiledPlan:
    """Which input is what, and how the output is rebuilt, from what the backend saw (the
    wrappers' sources are filled in once the graphs are lowered)."""
    if capture.calls != 1:
        raise UnsupportedWorkloadError(
            f"dynamo made {capture.calls} graphs of the model; compiled estimates take a model "
            "that compiles to one graph (no graph breaks). Pass compiled='eager'."
        )
    arg_positions = {
        id(t): i for i, t in enumerate(shim.call_leaves) if isinstance(t, torch.Tensor)
    }
    inputs: list[tuple[str, Any]] = []
    for example in capture.examples:
        if id(example) in names:
            inputs.append(names[id(example)])
        elif id(example) in arg_positions:
            inputs.append(("arg", arg_positions[id(example)]))
        else:
            raise UnsupportedWorkloadError(
                f"a graph input of the compiled model is neither a parameter, a buffer nor an "
                f"argument of its call ({type(example).__name__}); pass compiled='eager'."
            )
    forward = [(gm, md) for is_bw, gm, md in capture.graphs if not is_bw]
    backward = [gm for is_bw, gm, _ in capture.graphs if is_bw]
    fw_gm, metadata = forward[0]
    _check_metadata(metadata)
    outs = list(next(n for n in fw_gm.graph.nodes if n.op == "output").args[0])
    saved = 0
    if backward:
        placeholders = [n.name for n in backward[0].graph.nodes if n.op == "placeholder"]
        saved = sum(1 for name in placeholders if not name.startswith("tangents"))
    user = len(outs) - saved
    tangents = _tangents(metadata, user, backward[0]) if backward else []
    position: dict[int, int] = {}
    for i, ident in enumerate(capture.graph_outputs):
        position.setdefault(ident, i)
    spec, rebuilt = _rebuilt(shim.outputs[0], position)
    assert shim.call_spec is not None
    return CompiledPlan(
        inputs=inputs,
        call_spec=shim.call_spec,
        output_spec=spec,
        output_leaves=rebuilt,
        forward="",
        backward=None,
        user_outputs=user,
        tangents=tangents,
    )


def _rebuilt(out: Any, position: dict[int, int]) -> tuple[TreeSpec, list[tuple[str, Any]]]:
    """How the call's output is rebuilt: each tensor leaf from its graph output, the rest as
    they were."""
    leaves, spec = tree_flatten(out)
    rebuilt: list[tuple[str, Any]] = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            if id(leaf) not in position:
                raise UnsupportedWorkloadError(
                    "an output of the compiled model is not an output of its graph (an alias "
                    "of an input?); pass compiled='eager'."
                )
            rebuilt.append(("out", position[id(leaf)]))
        else:
            rebuilt.append(("const", leaf))
    return spec, rebuilt


def _check_metadata(metadata: Any) -> None:
    """Refuse what the replay does not do: inputs the runtime updates after the graph, outputs
    that are (views of) inputs. Outputs that are views of the graph's own results are fine:
    the forward returns them with their bases."""
    if metadata is None:
        return
    if getattr(metadata, "num_mutated_inp_runtime_indices", 0):
        raise UnsupportedWorkloadError(
            "the compiled model changes an input's metadata or data outside its graph; "
            "compiled estimates do not take that yet. Pass compiled='eager'."
        )
    kinds = {getattr(o.output_type, "name", "") for o in getattr(metadata, "output_info", [])}
    if kinds & {"alias_of_input", "is_input"}:
        raise UnsupportedWorkloadError(
            "an output of the compiled model is one of its inputs or a view of one; compiled "
            "estimates do not take that yet. Pass compiled='eager'."
        )


_DIFFERENTIABLE = {"non_alias", "unsafe_view_alias", "custom_function_view"}


def _tangents(metadata: Any, user: int, bw_gm: torch.fx.GraphModule) -> list[int]:
    """The forward outputs whose gradients the backward takes, in its ``tangents_*`` order:
    the call's outputs that need a gradient and are not views, then the bases of those that
    are (AOTAutograd's rule)."""
    info = list(getattr(metadata, "output_info", []))
    bases = int(getattr(metadata, "num_intermediate_bases", 0))
    wanted = sum(
        1 for n in bw_gm.graph.nodes if n.op == "placeholder" and n.name.startswith("tangents")
    )
    tangents = [
        i
        for i, o in enumerate(info)
        if getattr(o.output_type, "name", "") in _DIFFERENTIABLE and o.requires_grad
    ]
    tangents += [len(info) + j for j in range(bases)]
    if len(info) + bases != user or len(tangents) != wanted:
        raise UnsupportedWorkloadError(
            f"the compiled backward takes {wanted} output gradients where memfit counts "
            f"{len(tangents)}; pass compiled='eager' (--compiled eager)."
        )
    return tangents


def _lowered(capture: _Capture, is_backward: bool) -> str | None:
    """The wrapper of the captured forward or backward graph, lowered in its AOTAutograd
    metadata as on the GPU; None where there is none (a backward in inference)."""
    graphs = [(gm, metadata) for bw, gm, metadata in capture.graphs if bw == is_backward]
    if not graphs:
        return None
    gm, metadata = graphs[0]
    return lower_for_cuda(gm, is_backward, metadata)


@contextmanager
def _cuda_attention(
    sm: int, seen: dict[str, int], autocast: torch.dtype | None = None
) -> Iterator[None]:
    """``F.scaled_dot_product_attention`` calls the kernel the GPU of compute ``sm`` runs (on
    the CPU it would call the CPU's flash kernel, which saves other tensors). Under the step's
    ``autocast`` dtype its floating inputs are cast first, as CUDA autocast casts SDPA's (the
    kernels called here are below autocast: Llama's rotary embedding hands SDPA float32
    queries, which the GPU runs in bf16)."""
    original: Callable[..., Any] = F.scaled_dot_product_attention

    def attention(
        q: Any,
        k: Any,
        v: Any,
        attn_mask: Any = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: Any = None,
        enable_gqa: bool = False,
    ) -> Any:
        cast = autocast_dtype(autocast)  # a user's step's own region, if it entered one
        if cast is not None:
            q, k, v = (t.to(cast) if t.is_floating_point() else t for t in (q, k, v))
            if attn_mask is not None and attn_mask.is_floating_point():
                attn_mask = attn_mask.to(cast)
        backend = choose_backend(q, k, v, attn_mask, sm, enable_gqa, dropout_p)
        seen[backend] = seen.get(backend, 0) + 1
        if attn_mask is not None and attn_mask.dtype == torch.bool and backend != "math":
            attn_mask = torch.where(attn_mask, 0.0, -math.inf).to(q.dtype)
        aten = torch.ops.aten
        if backend == "cudnn":
            return aten._scaled_dot_product_cudnn_attention(
                q, k, v, attn_mask, True, dropout_p, is_causal, False, scale=scale
            )[0]
        if backend == "flash":
            return aten._scaled_dot_product_flash_attention(
                q, k, v, dropout_p, is_causal, False, scale=scale
            )[0]
        if backend == "efficient":
            if attn_mask is not None:
                attn_mask = attn_mask.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
            return aten._scaled_dot_product_efficient_attention(
                q, k, v, attn_mask, True, dropout_p, is_causal, scale=scale
            )[0]
        return aten._scaled_dot_product_attention_math(
            q, k, v, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa
        )[0]

    functional: Any = F
    functional.scaled_dot_product_attention = attention
    try:
        yield
    finally:
        functional.scaled_dot_product_attention = original
