"""Lower a torch.compile'd GPT-2 training step for CUDA on a machine without a GPU, and compare
inductor's buffer planning with the code the GPU host generated (compiled steps).

The path a compiled estimate will take (docs/estimate.md, "Compiled models"): dynamo and
AOTAutograd capture the step on fake CPU tensors (fake meta tensors lose the loss's backward;
fake CUDA tensors fail in autograd's engine without a device), inductor's joint passes and
min-cut partitioner split it, and each graph, moved to CUDA, is lowered by inductor up to its
wrapper code (``empty_strided_cuda``, ``del``, ``# reuse``) while the device queries are answered
as an sm90 GPU would. Kernels are never compiled. What the GPU decides by measuring (pad_mm's
benchmark of padded against unpadded matmuls) is taken as "pad" (``force_shape_pad``).

    PYTHONPATH=src python benchmarks/compiled_lowering.py --out DIR [--gpu-code OUTPUT_CODE.txt]

Writes DIR/fw.py and DIR/bw.py (the wrappers) and DIR/compiled_lowering.json: per graph, the
allocations, their own peak and what is returned, and with ``--gpu-code`` the same for the
GPU's code and the buffers (shape, dtype) only one of the two allocates.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

ELEMENT = {"float32": 4, "bfloat16": 2, "float16": 2, "int64": 8, "bool": 1, "uint8": 1, "int32": 4}
ALLOC = re.compile(r"^\s+(buf\w+) = empty_strided_cuda\(\(([^)]*)\), \(([^)]*)\), torch\.(\w+)\)")
REUSE = re.compile(r"^\s+(buf\w+) = (buf\w+); del (buf\w+)  # reuse")
FREE = re.compile(r"^\s+del (buf\w+)\s*$")
LOG_PREFIX = re.compile(r"^[VI]\d+ [\d:.]+ \d+ \S+\] \[[\d/]+\] \[__output_code\] ?")


class _Props:
    """An H200's properties, as inductor's heuristics read them."""

    name = "NVIDIA H200"
    major, minor = 9, 0
    multi_processor_count = 132
    total_memory = 140 * 2**30
    max_threads_per_multi_processor = 2048
    max_threads_per_block = 1024
    regs_per_multiprocessor = 65536
    warp_size = 32
    shared_memory_per_block_optin = 232448
    L2_cache_size = 60 * 2**20
    gcnArchName = ""
    uuid = "memfit"


def answer_device_queries(captured: dict[str, Any]) -> None:
    """Answer inductor's device queries as an sm90 GPU, and stop each lowering at its wrapper's
    source (kept in ``captured["code"]``): nothing is compiled or loaded."""
    import torch._inductor.config as config
    import torch._inductor.fx_passes.pad_mm as pad_mm
    import torch._inductor.scheduler as scheduler
    import torch.utils._triton as triton_utils
    from torch._dynamo.device_interface import CudaInterface
    from torch._inductor.graph import GraphLowering
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    def codegen_only(self: Any, *args: Any, **kwargs: Any) -> Any:
        code = self.codegen()
        captured["code"] = code[0] if isinstance(code, tuple) else code
        raise SystemExit("stopped after codegen")

    GraphLowering.compile_to_module = codegen_only
    props = _Props()
    cuda: Any = torch.cuda
    cuda.get_device_properties = lambda *a, **k: props
    cuda.get_device_capability = lambda *a, **k: (9, 0)
    cuda.current_device = lambda: 0
    cuda.get_rng_state = lambda *a, **k: torch.zeros(16, dtype=torch.uint8)
    cuda.set_rng_state = lambda *a, **k: None
    cuda._lazy_init = lambda: None
    cuda.is_current_stream_capturing = lambda: False
    cuda.graphs.is_current_stream_capturing = lambda: False
    interface: Any = CudaInterface
    interface.get_device_properties = staticmethod(lambda *a, **k: props)
    interface.Worker.get_device_properties = staticmethod(lambda *a, **k: props)
    interface.get_compute_capability = staticmethod(lambda *a, **k: 90)
    interface.current_device = staticmethod(lambda: 0)
    interface.device_count = staticmethod(lambda: 1)
    interface.is_bf16_supported = staticmethod(lambda *a, **k: True)
    backend = make_backend(GPUTarget("cuda", 90, 32))
    for module in (triton_utils, scheduler, pad_mm):  # imported by name in the last two
        module.has_triton = lambda: True  # type: ignore[attr-defined]
    triton_utils.triton_backend = lambda: backend
    triton_utils.triton_hash_with_backend = lambda: "memfit"
    import torch._inductor.codegen.triton as codegen_triton

    for name in ("triton_backend", "triton_hash_with_backend"):
        if hasattr(codegen_triton, name):
            setattr(codegen_triton, name, getattr(triton_utils, name))
    # the joint graph is on the CPU: pad matmuls as the GPU's measurement chose to
    config.force_shape_pad = True
    pad_mm.check_device = lambda a, b: True


def cuda_attention(
    q: Any,
    k: Any,
    v: Any,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: Any = None,
    enable_gqa: bool = False,
) -> Any:
    """SDPA as an H200 runs it for bf16 (cuDNN attention), a boolean mask made additive in the
    query's dtype as SDPA does before the kernel."""
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = torch.where(attn_mask, 0.0, float("-inf")).to(q.dtype)
    return torch.ops.aten._scaled_dot_product_cudnn_attention(
        q, k, v, attn_mask, True, dropout_p, is_causal, False, scale=scale
    )[0]


def capture(batch: int, seq_len: int) -> tuple[dict[str, Any], float]:
    """The partitioned forward and backward graphs of GPT-2's bf16-autocast training step."""
    import transformers
    from functorch.compile import make_boxed_func
    from torch._inductor.compile_fx import compile_fx
    from torch._subclasses.fake_tensor import FakeTensorMode

    graphs: dict[str, Any] = {}

    def inner(gm: Any, example_inputs: Any, **kwargs: Any) -> Any:
        graphs["bw" if kwargs.get("is_backward") else "fw"] = gm
        return make_boxed_func(gm.forward)

    config = transformers.GPT2Config()
    with FakeTensorMode(allow_non_fake_inputs=True), torch.device("cpu"):
        model = transformers.GPT2LMHeadModel(config)
        ids = torch.randint(0, config.vocab_size, (batch, seq_len))
    model.train()
    model.loss_type = "ForCausalLM"
    compiled = torch.compile(
        model, backend=lambda gm, ins: compile_fx(gm, ins, inner_compile=inner), fullgraph=True
    )
    start = time.perf_counter()
    saved, F.scaled_dot_product_attention = F.scaled_dot_product_attention, cuda_attention
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = compiled(input_ids=ids, labels=ids, use_cache=False)
        out.loss.backward()
    finally:
        F.scaled_dot_product_attention = saved
    return graphs, time.perf_counter() - start


def lower(gm: Any, is_backward: bool, captured: dict[str, Any]) -> str:
    """Inductor's wrapper source for one graph, moved from the CPU to CUDA."""
    from torch._inductor.compile_fx import compile_fx_inner
    from torch._subclasses.fake_tensor import FakeTensorMode

    cuda = torch.device("cuda", 0)
    for node in gm.graph.nodes:
        device = node.kwargs.get("device")
        if isinstance(device, torch.device) and device.type in ("cpu", "meta"):
            node.kwargs = {**node.kwargs, "device": cuda}
        node.args = tuple(cuda if isinstance(a, torch.device) else a for a in node.args)
    gm.recompile()
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    inputs = []
    with fake:
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                v = node.meta["val"]
                is_tensor = isinstance(v, torch.Tensor)
                inputs.append(
                    torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=cuda)
                    if is_tensor
                    else v
                )
    captured.pop("code", None)
    try:
        with torch._guards.tracing(torch._guards.TracingContext(fake)):
            compile_fx_inner(gm, inputs, is_backward=is_backward)
    except SystemExit:
        pass
    code = captured["code"]
    return str(getattr(code, "value", code))


def buffers(text: str) -> dict[str, Any]:
    """The allocation program of a wrapper's ``call``: count, own peak, returned bytes, and the
    (shape, dtype) of every allocation."""
    live: dict[str, int] = {}
    current = peak = 0
    shapes: Counter[str] = Counter()
    for line in text[text.index("def call(") :].splitlines():
        if m := ALLOC.match(line):
            dims = [int(d) for d in m[2].split(",") if d.strip()]
            strides = [int(s) for s in m[3].split(",") if s.strip()]
            span = 1 + sum((d - 1) * s for d, s in zip(dims, strides, strict=True))
            live[m[1]] = span * ELEMENT.get(m[4], 4)
            current += live[m[1]]
            peak = max(peak, current)
            shapes[f"({m[2].replace(' ', '')}) {m[4]}"] += 1
        elif m := REUSE.match(line):
            live[m[1]] = live.pop(m[2], 0)
        elif m := FREE.match(line):
            current -= live.pop(m[1], 0)
        elif line.strip().startswith("return "):
            break
    return {
        "allocations": sum(shapes.values()),
        "own_peak": peak,
        "returned": current,
        "shapes": shapes,
    }


def gpu_wrappers(path: Path) -> list[str]:
    """The ``call`` functions in a ``TORCH_LOGS=output_code`` log, forward first."""
    text = "\n".join(LOG_PREFIX.sub("", line) for line in path.read_text().splitlines())
    parts = text.split("def call(self, args):")[1:]
    return ["def call(" + part.split("Output code written")[0] for part in parts]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--gpu-code", type=Path, help="the GPU host's output_code log")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    captured: dict[str, Any] = {}
    answer_device_queries(captured)
    graphs, capture_seconds = capture(args.batch, args.seq_len)
    gpu = gpu_wrappers(args.gpu_code) if args.gpu_code else []
    rows = []
    for index, label in enumerate(("fw", "bw")):
        start = time.perf_counter()
        text = lower(graphs[label], label == "bw", captured)
        (args.out / f"{label}.py").write_text(text)
        mine = buffers(text)
        row: dict[str, Any] = {
            "graph": label,
            "lower_seconds": round(time.perf_counter() - start, 1),
        }
        row.update({k: v for k, v in mine.items() if k != "shapes"})
        if index < len(gpu):
            theirs = buffers(gpu[index])
            row["gpu"] = {k: v for k, v in theirs.items() if k != "shapes"}
            row["only_gpu"] = dict(theirs["shapes"] - mine["shapes"])
            row["only_here"] = dict(mine["shapes"] - theirs["shapes"])
        rows.append(row)
        print(json.dumps(row), flush=True)
    import transformers

    meta = {
        "date": dt.date.today().isoformat(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "command": " ".join(sys.argv),
        "capture_seconds": round(capture_seconds, 1),
        "workload": f"GPT-2 124M, {args.batch} x {args.seq_len}, bf16 autocast, training",
    }
    (args.out / "compiled_lowering.json").write_text(
        json.dumps({"meta": meta, "rows": rows}, indent=1)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
