"""Inductor's lowering of a compiled graph for CUDA, on a machine without a GPU.

A compiled step's memory is what inductor's generated wrapper allocates: its buffers
(``empty_strided_cuda``), their reuse (``# reuse``), their frees (``del``) and the extern and
fallback kernels' own outputs. Inductor decides all of it before any kernel is compiled, from
the graph and a few device properties. So the lowering runs here with those properties answered
as the target GPU's (:func:`answering_as`) and stops at the wrapper's source (nothing is
compiled, loaded or benchmarked). What the GPU decides by timing kernels is answered as the
H200's timing chose (:func:`pads_faster`): pad_mm pads a misaligned matmul that runs on tensor
cores (bf16, fp16, fp32 under TF32) and leaves a plain fp32 one as it is
(benchmarks/results/2026-12-01-h200-user-steps-compiled: with that, the wrappers of compiled
GPT-2 and BERT-base steps are the GPU's own to the byte under the same torch version).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from memfit._errors import UnsupportedWorkloadError
from memfit._gpus import GPU

__all__ = [
    "KernelTuning",
    "PadBenchmark",
    "answering_as",
    "first_call_tuning",
    "kernel_traffic",
    "lower_for_cuda",
    "pads_faster",
    "recording_pad_benchmarks",
]

# The L2 cache inductor's benchmarker flushes between timed runs with a buffer of its size
# (60 MiB on the H200: the allocator trace of a compiled GPT-2 medium, torch 2.11)
L2_FLUSH_BYTES = 60 * 2**20


class _Properties:
    """What inductor reads of ``torch.cuda.get_device_properties``."""

    def __init__(self, gpu: GPU) -> None:
        self.name = gpu.name
        self.major, self.minor = gpu.compute_capability
        self.multi_processor_count = gpu.sm_count
        self.total_memory = gpu.total
        self.max_threads_per_multi_processor = gpu.threads_per_sm
        self.max_threads_per_block = 1024
        self.regs_per_multiprocessor = 65536
        self.warp_size = 32
        self.shared_memory_per_block_optin = 232448
        self.L2_cache_size = 60 * 2**20
        self.gcnArchName = ""
        self.uuid = "memfit"


class _Stop(BaseException):
    """Raised at the end of code generation: the wrapper's source is all that is needed (a
    BaseException, which inductor does not wrap in its own errors)."""

    def __init__(self, source: str) -> None:
        super().__init__("stopped after code generation")
        self.source = source


@contextmanager
def answering_as(gpu: GPU) -> Iterator[None]:
    """Inductor's device queries answered as ``gpu`` would, every patch undone on exit."""
    try:
        import torch._functorch.config as functorch_config
        import torch._inductor.config as config
    except ImportError as exc:  # pragma: no cover - inductor ships with torch
        raise _missing(exc) from exc
    patches = _device_patches(gpu)
    saved = [(owner, name, owner.__dict__.get(name, _MISSING)) for owner, name, _ in patches]
    settings = config.patch(
        fx_graph_cache=False,  # a cached graph would skip code generation
        fx_graph_remote_cache=False,
    )
    with settings, functorch_config.patch(enable_autograd_cache=False):
        for owner, name, value in patches:
            setattr(owner, name, value)
        try:
            yield
        finally:
            for owner, name, value in reversed(saved):
                if value is _MISSING:
                    delattr(owner, name)
                else:
                    setattr(owner, name, value)


def _missing(exc: ImportError) -> UnsupportedWorkloadError:
    return UnsupportedWorkloadError(
        f"Estimating a compiled step needs inductor and triton ({exc}); this torch build has "
        "no triton (CPU-only wheels do not ship it). Install torch's CUDA build on this "
        "machine (no GPU is needed), or pass compiled='eager' (--compiled eager) for the "
        "uncompiled step, usually more than the compiled one takes."
    )


def _device_patches(gpu: GPU) -> list[tuple[Any, str, Any]]:
    """(owner, attribute, value): the device queries inductor makes, answered as ``gpu``;
    pad_mm's timed choice answered without timing; code generation stopped at the wrapper's
    source."""
    try:
        import torch._inductor.fx_passes.pad_mm as pad_mm
        import torch._inductor.scheduler as scheduler
        import torch.utils._triton as triton_utils
        from torch._dynamo.device_interface import CudaInterface
        from torch._inductor.graph import GraphLowering
        from triton.backends.compiler import GPUTarget
        from triton.compiler.compiler import make_backend
    except ImportError as exc:
        raise _missing(exc) from exc
    props = _Properties(gpu)
    major, minor = gpu.compute_capability
    backend = make_backend(GPUTarget("cuda", major * 10 + minor, 32))
    interface: Any = CudaInterface
    answers = {"triton_backend": lambda: backend, "triton_hash_with_backend": lambda: "memfit"}

    def codegen_only(self: Any, *args: Any, **kwargs: Any) -> Any:
        code = self.codegen()
        code = code[0] if isinstance(code, tuple) else code
        raise _Stop(str(getattr(code, "value", code)))

    patches: list[tuple[Any, str, Any]] = [
        (GraphLowering, "compile_to_module", codegen_only),
        (torch.cuda, "get_device_properties", lambda *a, **k: props),
        (torch.cuda, "get_device_capability", lambda *a, **k: gpu.compute_capability),
        (torch.cuda, "current_device", lambda: 0),
        (torch.cuda, "get_rng_state", lambda *a, **k: torch.zeros(16, dtype=torch.uint8)),
        (torch.cuda, "set_rng_state", lambda *a, **k: None),
        (torch.cuda, "_lazy_init", lambda: None),
        (torch.cuda, "is_current_stream_capturing", lambda: False),
        (torch.cuda.graphs, "is_current_stream_capturing", lambda: False),
        (interface, "get_device_properties", staticmethod(lambda *a, **k: props)),
        (interface.Worker, "get_device_properties", staticmethod(lambda *a, **k: props)),
        (interface, "get_compute_capability", staticmethod(lambda *a, **k: major * 10 + minor)),
        (interface, "current_device", staticmethod(lambda: 0)),
        (interface, "device_count", staticmethod(lambda: 1)),
        (interface, "is_bf16_supported", staticmethod(lambda *a, **k: major >= 8)),
        *((triton_utils, name, answer) for name, answer in answers.items()),
        (pad_mm, "check_device", lambda a, b: True),  # the joint graph is on the CPU
        (pad_mm, "should_pad", _should_pad),  # its own would time the matmul on the GPU
    ]
    # has_triton is imported by name in several modules: all of them answer yes
    for module in (triton_utils, scheduler, pad_mm, sys.modules.get("torch._inductor.utils")):
        if module is not None and hasattr(module, "has_triton"):
            patches.append((module, "has_triton", lambda: True))
    codegen_triton = sys.modules.get("torch._inductor.codegen.triton")
    for name, answer in answers.items():  # imported by name there too
        if codegen_triton is not None and hasattr(codegen_triton, name):
            patches.append((codegen_triton, name, answer))
    return patches


_MISSING = object()


def pads_faster(dtype: torch.dtype) -> bool:
    """Whether pad_mm's timing on the GPU finds a misaligned matmul of ``dtype`` faster padded.

    pad_mm pads only when the padded matmul, copies included, is more than 10% faster. On
    tensor cores (bf16, fp16, and fp32 under TF32) cuBLAS needs rows aligned to 16 bytes and
    falls back to slower kernels otherwise: the H200 padded GPT-2's bf16 vocabulary (50,257 ->
    50,264), GPT-2 medium's and a Llama-style model's. Plain fp32 runs on the CUDA cores, where
    alignment gains little: the H200 left BERT-base's fp32 vocabulary (30,522; its three
    matmuls timed, none padded) and GPT-2's (50,257, b2 x 128) unpadded
    (benchmarks/results/2026-12-01-h200-user-steps-compiled). fp32 under TF32 is not measured:
    padded, the side that costs memory."""
    if dtype in (torch.bfloat16, torch.float16):
        return True
    return dtype == torch.float32 and bool(torch.backends.cuda.matmul.allow_tf32)


def _should_pad(match: Any, mat1: Any, mat2: Any, op: Any, input: Any = None) -> bool:
    """pad_mm's ``should_pad`` as the GPU answers it: a matmul it can pad (aligned shapes,
    deterministic mode and the like are its own checks) is padded if :func:`pads_faster`."""
    import torch._inductor.fx_passes.pad_mm as pad_mm

    return bool(pad_mm.can_pad(mat1, mat2, op, input)) and pads_faster(mat1.dtype)


Meta = tuple[tuple[int, ...], tuple[int, ...], torch.dtype]  # shape, stride, dtype


@dataclass(frozen=True)
class PadBenchmark:
    """One matmul pad_mm could pad: on the GPU its first compile times the padded and the
    unpadded matmul, on real tensors of these shapes, whichever it then chooses (a warm
    inductor cache skips it)."""

    op: str  # mm, addmm or bmm
    mat1: Meta
    mat2: Meta
    bias: Meta | None
    padding: tuple[int, int, int]  # m, k, n
    pre_padded: tuple[bool, bool]  # mat1, mat2 padded once, outside the timed runs


def _meta(t: Any) -> Meta:
    return tuple(int(d) for d in t.shape), tuple(int(d) for d in t.stride()), t.dtype


@contextmanager
def recording_pad_benchmarks(found: list[PadBenchmark]) -> Iterator[None]:
    """While a graph is captured, every matmul pad_mm times on the GPU is added to ``found``:
    each it can pad, padded or not in the end (inductor checks whether the matmul is compute
    bound first, which needs the GPU's measured bandwidth: taken as yes, as for the large
    matmuls whose timing shows in the H200's traces). Inside :func:`answering_as`."""
    import torch._inductor.fx_passes.pad_mm as pad_mm

    original = pad_mm.should_pad

    def should_pad(match: Any, mat1: Any, mat2: Any, op: Any, input: Any = None) -> bool:
        if pad_mm.can_pad(mat1, mat2, op, input):
            found.append(_benchmark(pad_mm, match, mat1, mat2, op, input))
        return bool(original(match, mat1, mat2, op, input))

    pad_mm.should_pad = should_pad
    try:
        yield
    finally:
        pad_mm.should_pad = original


def _benchmark(pad_mm: Any, match: Any, mat1: Any, mat2: Any, op: Any, bias: Any) -> PadBenchmark:
    """What pad_mm's benchmark of one matmul allocates, read off its own rules."""
    name = str(getattr(op, "__name__", op)).split(".")[-1]
    row = 1 if name == "bmm" else 0
    m, k = int(mat1.shape[row]), int(mat1.shape[row + 1])
    n = int(mat2.shape[row + 1])
    padding = (
        pad_mm.get_padded_length(m, pad_mm.get_alignment_size(mat1)),
        pad_mm.get_padded_length(k, pad_mm.get_alignment_size(mat1)),
        pad_mm.get_padded_length(n, pad_mm.get_alignment_size(mat2)),
    )
    pre = tuple(bool(pad_mm.should_exclude_padding_time(match, a)) for a in ("mat1", "mat2"))
    return PadBenchmark(
        op=name,
        mat1=_meta(mat1),
        mat2=_meta(mat2),
        bias=_meta(bias) if bias is not None and name == "addmm" else None,
        padding=padding,
        pre_padded=(pre[0], pre[1]),
    )


def lower_for_cuda(gm: torch.fx.GraphModule, is_backward: bool, metadata: Any = None) -> str:
    """The wrapper source inductor generates for ``gm`` (captured on the CPU) on CUDA device 0.
    ``metadata`` is AOTAutograd's metadata of the capture (``fw_metadata``), in whose context
    inductor compiles on the GPU: it names the saved tensors the backward may write over once
    read (donated buffers, reused in place as the GPU's backward does). Call inside
    :func:`answering_as`."""
    from torch._inductor.compile_fx import compile_fx_inner
    from torch._subclasses.fake_tensor import FakeTensorMode

    cuda = torch.device("cuda", 0)
    for node in gm.graph.nodes:
        device = node.kwargs.get("device")
        if isinstance(device, torch.device) and device.type == "cpu":
            node.kwargs = {**node.kwargs, "device": cuda}
        node.args = tuple(
            cuda if isinstance(a, torch.device) and a.type == "cpu" else a for a in node.args
        )
    gm.recompile()
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    inputs: list[Any] = []
    with fake:
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                value = node.meta["val"]
                if isinstance(value, torch.Tensor):
                    device = cuda if value.device.type == "cpu" else value.device
                    value = torch.empty_strided(
                        value.shape, value.stride(), dtype=value.dtype, device=device
                    )
                inputs.append(value)
    context = torch._guards.TracingContext(fake)
    context.fw_metadata = metadata
    try:
        with torch._guards.tracing(context):
            compile_fx_inner(gm, inputs, is_backward=is_backward)
    except _Stop as stop:
        return stop.source
    except Exception as exc:  # an inductor that wraps even the stop: found in the chain
        cause: BaseException | None = exc
        while cause is not None and not isinstance(cause, _Stop):
            cause = cause.__cause__ or getattr(cause, "inner_exception", None)
        if isinstance(cause, _Stop):
            return cause.source
        raise
    raise UnsupportedWorkloadError(
        "inductor compiled a graph without generating a wrapper (a cached graph?): the "
        "compiled step could not be lowered; pass compiled='eager' (--compiled eager)."
    )


@dataclass(frozen=True)
class KernelTuning:
    """A Triton kernel that times its configs at its first call when inductor's cache is cold:
    each config is run once (the warm-up), then timed between L2 flushes (the flush buffer
    live), every run on fresh clones of the arguments the kernel writes (torch 2.11's
    ``CachingAutotuner.bench`` and ``InductorBenchmarker.benchmark_gpu``). A warm cache holds
    the chosen config: nothing is timed."""

    configs: int
    mutated: tuple[int, ...]  # positions, in the kernel's call, of the arguments it writes


_KERNEL = re.compile(
    r"^(\w+) = async_compile\.triton\('\w+', '''\n(.*?)''', device_str='cuda'\)", re.M | re.S
)


_SIGNATURE = re.compile(r"^def \w+\(([^)]*)\)", re.M)


def kernel_traffic(source: str) -> dict[str, tuple[int, ...]]:
    """How often each Triton kernel of a wrapper's ``source`` moves each of its arguments over
    memory, by kernel name: an ``in_out_ptr`` is read and written (2), an ``in_ptr`` read and
    an ``out_ptr`` written (1), sizes and scalars not at all (0). The kernel's traffic is then
    its tensors' bytes so weighted (the step-time model's ``mem:fused`` ops)."""
    found: dict[str, tuple[int, ...]] = {}
    for name, module in _KERNEL.findall(source):
        signature = _SIGNATURE.search(module)
        if signature is None:
            continue
        names = [a.strip().partition(":")[0] for a in signature.group(1).split(",") if a.strip()]
        found[name] = tuple(
            2 if a.startswith("in_out_ptr") else 1 if "ptr" in a else 0 for a in names
        )
    return found


def first_call_tuning(source: str) -> dict[str, KernelTuning]:
    """The Triton kernels of a wrapper's ``source`` that start with more than one config, by
    name. Inductor's own heuristics (``triton_heuristics.pointwise``, ``reduction``, ...) pick
    the configs from the kernel's decorator, on the CPU: the kernel's module is run with
    ``triton.jit`` left out and the autotuner's constructor recording its configs (nothing is
    compiled). A kernel whose module does not run so is taken as untuned. Configs the GPU
    would drop when compiling (too many registers) are counted: the H200's traces of a
    compiled ResNet-50 and ViT-S/16 (torch 2.11) show 158 and 52 flushes for the 155 and 50
    configs counted so. Call inside :func:`answering_as`."""
    from torch._inductor.runtime import triton_heuristics

    found: dict[str, KernelTuning] = {}
    seen: dict[str, Any] = {}

    def record(size_hints: Any, configs: Any, *args: Any, **kwargs: Any) -> Any:
        seen["configs"], seen["meta"] = configs, (args, kwargs)
        return lambda fn: fn

    original = triton_heuristics.cached_autotune
    triton_heuristics.cached_autotune = record
    try:
        for name, module in _KERNEL.findall(source):
            seen.clear()
            text = module.replace("@triton.jit\n", "")
            text = text.replace("triton_helpers.set_driver_to_gpu()", "")
            try:
                exec(compile(text, name, "exec"), {"__file__": f"{name}.py", "__name__": name})
            except Exception:  # a kernel memfit cannot read is taken as untuned
                continue
            tuning = _tuning(seen)
            if tuning is not None and tuning.configs > 1:
                found[name] = tuning
    finally:
        triton_heuristics.cached_autotune = original
    return found


def _tuning(seen: dict[str, Any]) -> KernelTuning | None:
    """The configs and written arguments the autotuner's constructor was given."""
    if "configs" not in seen:
        return None
    args, kwargs = seen["meta"]
    triton_meta = kwargs.get("triton_meta", args[0] if args else None) or {}
    inductor_meta = kwargs.get("inductor_meta") or {}
    # the call passes the kernel's arguments but its compile-time constants
    signature = [a for a, kind in triton_meta.get("signature", {}).items() if kind != "constexpr"]
    mutated = [signature.index(a) for a in inductor_meta.get("mutated_arg_names", [])]
    return KernelTuning(configs=len(seen["configs"]), mutated=tuple(mutated))
