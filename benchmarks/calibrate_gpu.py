"""Measure the rates a step-time model needs, once per GPU type (issue 13's calibration).

    PYTHONPATH=src python benchmarks/calibrate_gpu.py --out FILE.json

Run on the GPU. What it measures, each as a curve of (work, seconds) points, so that a model can
read the time of an op of any size between them:

* ``mm:<dtype>``: ``torch.mm`` of square matrices (work: FLOPs), bfloat16, float16, float32
  (PyTorch's default: no TF32) and ``mm:tf32`` with TF32 allowed;
* ``conv:<dtype>`` / ``conv_bwd:<dtype>``: ResNet-50's convolutions (1x1, 3x3, strided, the
  7x7 stem) at batch 16 and 64, forward and backward (work: FLOPs; the backward's are twice the
  forward's, PyTorch's formula), float32 (cuDNN's default TF32) and bfloat16, channels first;
* ``attn:<dtype>`` / ``attn_bwd:<dtype>``: ``scaled_dot_product_attention`` forward and backward
  (causal off, head dim 64; work: FLOPs by PyTorch's formula), bfloat16 (flash) and float32
  (memory-efficient);
* ``mem``: an out-of-place add of float32 tensors (work: bytes read and written), from 4 KiB to
  1 GiB: the bandwidth, and the floor of a small kernel;
* ``cpu``: the host's seconds per op when Python issues small ops back to back (``x.add_(1)``,
  no sync), the floor of eager dispatch;
* ``kernel_floor``: a small kernel's GPU time in a CUDA graph (no host launch in the way);
* ``input``: seconds per byte to make a float32 batch on the host and copy it to the GPU;
* ``tiny``: small training workloads (GPT-2, BERT, ResNet-18 shapes, a few MB of weights) whose
  GPU work is negligible: each phase's seconds (the GPU synchronized at each phase boundary),
  steady steps only. ``benchmarks/calibration_fit.py`` divides them by the ops a trace counts
  to get the host's cost of an op in each phase, and writes the calibration memfit ships.

Timing: CUDA events around repeated launches after warm-up, the median of several repeats.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

TINY: dict[str, dict[str, Any]] = {
    "gpt2-tiny": {"batch_size": 2, "seq_len": 32},
    "bert-tiny": {"batch_size": 2, "seq_len": 32},
    "resnet18-tiny": {"batch_size": 2},
}


def gpu_seconds(fn: Any, reps: int = 20, repeats: int = 5) -> float:
    """Median seconds of one ``fn()`` on the GPU, ``reps`` back to back per timing."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / reps)
    return statistics.median(times)


def matmul_curves() -> dict[str, list[list[float]]]:
    curves: dict[str, list[list[float]]] = {}
    for name, dtype, tf32 in [
        ("mm:bf16", torch.bfloat16, False),
        ("mm:fp16", torch.float16, False),
        ("mm:fp32", torch.float32, False),
        ("mm:tf32", torch.float32, True),
    ]:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        points = []
        for n in (64, 128, 256, 512, 1024, 2048, 4096, 8192):
            a = torch.randn(n, n, device="cuda", dtype=dtype)
            b = torch.randn(n, n, device="cuda", dtype=dtype)
            reps = 50 if n <= 2048 else 10
            points.append([2.0 * n**3, gpu_seconds(lambda a=a, b=b: torch.mm(a, b), reps)])
        curves[name] = points
        print(name, _rates(points), flush=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    return curves


# ResNet-50's convolutions (kernel, in, out, size, stride) at two batch sizes: 1x1 and 3x3,
# strided and not, and the 7x7 stem, as the models run them (channels first)
CONV_SHAPES = [
    (7, 3, 64, 224, 2),
    (1, 64, 64, 56, 1),
    (3, 64, 64, 56, 1),
    (1, 64, 256, 56, 1),
    (1, 256, 64, 56, 1),
    (3, 128, 128, 56, 2),
    (1, 128, 512, 28, 1),
    (1, 512, 128, 28, 1),
    (3, 256, 256, 14, 1),
    (1, 1024, 256, 14, 1),
    (3, 512, 512, 7, 1),
    (1, 2048, 512, 7, 1),
]


def conv_curves() -> dict[str, list[list[float]]]:
    """Forward and backward (input and weight gradients) of ResNet-50's convolutions."""
    from torch.utils.flop_counter import FlopCounterMode

    curves: dict[str, list[list[float]]] = {}
    for name, dtype in [("fp32", torch.float32), ("bf16", torch.bfloat16)]:
        forward, backward = [], []
        for batch in (16, 64):
            for kernel, cin, cout, size, stride in CONV_SHAPES:
                x = torch.randn(
                    batch, cin, size, size, device="cuda", dtype=dtype, requires_grad=True
                )
                w = torch.randn(
                    cout, cin, kernel, kernel, device="cuda", dtype=dtype, requires_grad=True
                )

                def conv(x: Any = x, w: Any = w, s: int = stride, k: int = kernel) -> Any:
                    return torch.nn.functional.conv2d(x, w, stride=s, padding=k // 2)

                grad = torch.randn_like(conv())

                def both(x: Any = x, w: Any = w, g: Any = grad, f: Any = conv) -> None:
                    torch.autograd.grad(f(x, w), (x, w), g)

                with FlopCounterMode(display=False) as counter:
                    conv()
                flops = float(counter.get_total_flops())
                t_fwd, t_both = gpu_seconds(conv), gpu_seconds(both)
                forward.append([flops, t_fwd])
                backward.append([2 * flops, max(t_both - t_fwd, 1e-6)])
        curves[f"conv:{name}"] = sorted(forward)
        curves[f"conv_bwd:{name}"] = sorted(backward)
        print(f"conv:{name}", _rates(sorted(forward)), flush=True)
        print(f"conv_bwd:{name}", _rates(sorted(backward)), flush=True)
    return curves


def attention_curves() -> dict[str, list[list[float]]]:
    from torch.utils.flop_counter import FlopCounterMode

    curves: dict[str, list[list[float]]] = {}
    for dtype_name, dtype in [("bf16", torch.bfloat16), ("fp32", torch.float32)]:
        forward, backward = [], []
        for batch, seq in [(1, 128), (4, 256), (8, 512), (8, 1024), (4, 2048), (2, 4096)]:
            q, k, v = (
                torch.randn(batch, 12, seq, 64, device="cuda", dtype=dtype, requires_grad=True)
                for _ in range(3)
            )
            grad = torch.randn(batch, 12, seq, 64, device="cuda", dtype=dtype)

            def fwd(q: Any = q, k: Any = k, v: Any = v) -> torch.Tensor:
                return torch.nn.functional.scaled_dot_product_attention(q, k, v)

            def both(q: Any = q, k: Any = k, v: Any = v, g: Any = grad) -> None:
                torch.autograd.grad(fwd(q, k, v), (q, k, v), g)

            with FlopCounterMode(display=False) as counter:
                fwd()
            flops = float(counter.get_total_flops())
            t_fwd = gpu_seconds(fwd, reps=10)
            t_both = gpu_seconds(both, reps=10)
            forward.append([flops, t_fwd])
            backward.append([2.5 * flops, max(t_both - t_fwd, 1e-6)])  # PyTorch: bwd = 2.5 fwd
        curves[f"attn:{dtype_name}"] = forward
        curves[f"attn_bwd:{dtype_name}"] = backward
        print(f"attn:{dtype_name}", _rates(forward), _rates(backward), flush=True)
    return curves


def memory_curve() -> list[list[float]]:
    points = []
    for log2 in range(10, 29, 2):  # 1 Ki to 256 Mi float32 elements
        n = 2**log2
        a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        out = torch.empty_like(a)
        reps = 200 if n < 2**20 else 20
        points.append([12.0 * n, gpu_seconds(lambda a=a, b=b, o=out: torch.add(a, b, out=o), reps)])
    print("mem", [f"{p[0]:.0e}B {p[0] / p[1] / 1e9:.0f}GB/s" for p in points], flush=True)
    return points


def cpu_dispatch() -> float:
    x = torch.zeros(16, device="cuda")
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(2000):
            x.add_(1)
        best = min(best, (time.perf_counter() - start) / 2000)
        torch.cuda.synchronize()
    print(f"cpu dispatch {best * 1e6:.2f} us/op", flush=True)
    return best


def kernel_floor() -> float:
    """The GPU's seconds per small kernel with no host in the way: a CUDA graph of 500 adds."""
    x = torch.zeros(256, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        x.add_(1)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(500):
            x.add_(1)
    seconds = gpu_seconds(graph.replay, reps=5) / 500
    print(f"kernel floor {seconds * 1e6:.2f} us", flush=True)
    return seconds


def input_rates() -> dict[str, float]:
    """Seconds per byte to make a float32 batch on the host (``torch.randn``, as memfit's loop
    and most synthetic benchmarks do) and to copy it to the GPU from pageable memory."""
    n = 2**24
    made, copied = [], []
    for _ in range(5):
        start = time.perf_counter()
        cpu = torch.randn(n)
        made.append(time.perf_counter() - start)
        torch.cuda.synchronize()
        start = time.perf_counter()
        cpu.to("cuda")
        torch.cuda.synchronize()
        copied.append(time.perf_counter() - start)
    rates = {"make": statistics.median(made) / (4 * n), "h2d": statistics.median(copied) / (4 * n)}
    print(f"host randn {1 / rates['make'] / 1e9:.2f} GB/s, h2d {1 / rates['h2d'] / 1e9:.1f} GB/s")
    return rates


def tiny_workload(name: str, steps: int) -> Any:
    from memfit.workload import make_workload

    settings = dict(TINY[name])
    if name == "resnet18-tiny":
        import torchvision

        def build() -> torch.nn.Module:
            return torchvision.models.resnet18(num_classes=10)

        def images() -> Any:
            return (torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,)))

        def loss(model: Any, batch: Any) -> torch.Tensor:
            return torch.nn.functional.cross_entropy(model(batch[0]), batch[1])

        return make_workload(build, images, loss_fn=loss, steps=steps, gpu="h200")
    import transformers as tf

    if name == "gpt2-tiny":
        config: Any = tf.GPT2Config(
            n_layer=2, n_embd=64, n_head=2, vocab_size=512, bos_token_id=0, eos_token_id=0
        )
        cls: Any = tf.GPT2LMHeadModel
    else:
        config = tf.BertConfig(
            num_hidden_layers=2,
            hidden_size=64,
            num_attention_heads=2,
            intermediate_size=256,
            vocab_size=512,
        )
        cls = tf.BertForMaskedLM

    def tokens() -> Any:
        ids = torch.randint(0, 512, (settings["batch_size"], settings["seq_len"]))
        return {"input_ids": ids, "labels": ids.clone()}

    return make_workload(lambda: cls(config), tokens, steps=steps, gpu="h200")


def tiny_phases(name: str, variant: dict[str, Any], steps: int = 12) -> dict[str, float]:
    """Median seconds of each phase of the steady steps (3 onwards) of a tiny workload."""
    import dataclasses

    from torch.utils._pytree import tree_map

    from memfit.workload import StepHooks, optimizer_for, prepare_model, run_steps

    workload = dataclasses.replace(tiny_workload(name, steps), **variant)
    net = prepare_model(workload, "cuda")
    optimizer = optimizer_for(workload, net)
    marks: list[tuple[str, float]] = []

    def phase(label: str) -> None:
        torch.cuda.synchronize()
        marks.append((label, time.perf_counter()))

    hooks = StepHooks(
        to_device=lambda b: tree_map(lambda t: t.cuda() if isinstance(t, torch.Tensor) else t, b),
        autocast=lambda dtype: torch.autocast("cuda", dtype=dtype),
        grad_scaler=lambda: torch.amp.GradScaler("cuda"),
        phase=phase,
    )
    run_steps(workload, net, optimizer, hooks)
    per: dict[str, list[float]] = {}
    for (label, t0), (_, t1) in itertools.pairwise(marks):
        step, _, what = label.partition(".")
        if step.startswith("step") and int(step[4:]) >= 3:
            per.setdefault(what, []).append(t1 - t0)
    return {k: statistics.median(v) for k, v in per.items()}


TINY_VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("fp32", {}),
    ("bf16-mixed", {"precision": "bf16-mixed"}),
    ("bf16-mixed, fused", {"precision": "bf16-mixed", "optimizer": "adamw-fused"}),
    ("bf16-mixed, checkpointing", {"precision": "bf16-mixed", "activation_checkpointing": True}),
    (
        "bf16-mixed, selective",
        {"precision": "bf16-mixed", "activation_checkpointing": "selective"},
    ),
]


def tiny_rows() -> list[dict[str, Any]]:
    rows = []
    for name in TINY:
        for variant_name, variant in TINY_VARIANTS:
            try:
                phases = tiny_phases(name, variant)
            except Exception as exc:  # kept in the results, the rest runs
                rows.append({"model": name, "variant": variant_name, "error": repr(exc)[:400]})
                continue
            rows.append(
                {
                    "model": name,
                    "variant": variant_name,
                    "settings": variant,
                    "phase_seconds": phases,
                }
            )
            shown = " ".join(f"{k} {v * 1e3:.2f}ms" for k, v in phases.items())
            print(f"{name:14s} {variant_name:28s} {shown}", flush=True)
    return rows


def _rates(points: list[list[float]]) -> str:
    return " ".join(f"{p[0] / p[1] / 1e12:.0f}" for p in points) + " TFLOP/s"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    started = time.time()
    curves = {**matmul_curves(), **conv_curves(), **attention_curves(), "mem": memory_curve()}
    result = {
        "meta": {
            "date": dt.date.today().isoformat(),
            "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "command": " ".join(sys.argv),
        },
        "curves": curves,
        "cpu_dispatch_seconds": cpu_dispatch(),
        "kernel_floor_seconds": kernel_floor(),
        "input_seconds_per_byte": input_rates(),
        "tiny": tiny_rows(),
    }
    result["meta"]["seconds"] = round(time.time() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
