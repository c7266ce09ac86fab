"""Measure the rates a step-time model needs, once per GPU type (issue 13's calibration).

    PYTHONPATH=src python benchmarks/calibrate_gpu.py --out FILE.json [--only conv ...]
    PYTHONPATH=src python benchmarks/calibrate_gpu.py --out FILE.json --device cpu --quick

Run on the GPU (``--only`` picks parts; ``--device cpu`` runs the convolution part on the CPU,
eagerly, to check its logic: its seconds are not the GPU's). What it measures, each as a curve
of (work, seconds) points, so that a model can read the time of an op of any size between them:

* ``mm:<dtype>``: ``torch.mm`` of square matrices (work: FLOPs), bfloat16, float16, float32
  (PyTorch's default: no TF32) and ``mm:tf32`` with TF32 allowed;
* ``conv:<class>:<dtype>`` / ``conv_bwd:<class>:<dtype>``: convolutions by the shape class the
  trace records (1x1, 3x3, 3x3 and 1x1 stride 2, the 7x7 stride-2 stem, a ViT's 16x16 patch
  embedding; depthwise 3x3, 3x3 stride 2, 5x5 and 7x7, and RegNet's grouped 3x3), real layer
  shapes at batches that span 1e8 to 1e12 forward FLOPs, forward
  (``conv2d``) and backward (``aten.convolution_backward`` with the gradients autograd asks
  for; work: FLOPs by PyTorch's formulas, as the trace counts them), float32 (cuDNN's default
  TF32) and bfloat16, channels first, each timed inside a CUDA graph (the curves listed in
  ``graph_timed``): eager timings of the small ones were the host's launch;
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

Timing: CUDA events around repeated launches after warm-up, the median of several repeats
(the convolutions: around replays of a CUDA graph of repeated calls).
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import math
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
# the same tiny models deeper (``--only tiny-deep``, session 18): with two depths each, a
# phase's host seconds split into a cost per op and what the phase costs whatever its ops
# (a transformers model's Python around its layers, the backward's start), which the two-layer
# models alone fold into the cost per op
TINY_DEEP: dict[str, dict[str, Any]] = {
    "gpt2-tiny-8": {"batch_size": 2, "seq_len": 32, "layers": 8},
    "bert-tiny-8": {"batch_size": 2, "seq_len": 32, "layers": 8},
    "resnet34-tiny": {"batch_size": 2},
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


def unaligned_matmul_curves() -> dict[str, list[list[float]]]:
    """``mm_a<N>:<dtype>``: half-precision products whose rows are N-element aligned (N = 1, 2,
    4: a vocabulary of 50257 or 30522 columns), which cuBLAS runs with slower kernels than
    16-byte aligned ones. A language model's head at growing token counts (k = 768, n near
    32000): each point the median of its three products in a training step (forward, and the
    two of backward, whose rates differ)."""
    curves: dict[str, list[list[float]]] = {}
    for dtype_name, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        for align, n in ((1, 32001), (2, 32002), (4, 32004)):
            points = []
            for m in (256, 1024, 4096, 16384, 32768):
                k = 768
                a = torch.randn(m, k, device="cuda", dtype=dtype)
                b = torch.randn(k, n, device="cuda", dtype=dtype)
                g = torch.randn(m, n, device="cuda", dtype=dtype)
                reps = 20 if m <= 4096 else 5
                times = [
                    gpu_seconds(lambda a=a, b=b: torch.mm(a, b), reps),
                    gpu_seconds(lambda g=g, b=b: torch.mm(g, b.t()), reps),
                    gpu_seconds(lambda a=a, g=g: torch.mm(a.t(), g), reps),
                ]
                points.append([2.0 * m * k * n, statistics.median(times)])
                del a, b, g
            key = f"mm_a{align}:{dtype_name}"
            curves[key] = points
            print(key, _rates(points), flush=True)
    return curves


# Convolutions by the shape class memfit's trace gives them (``memfit.trace.conv_class``):
# kernel, stride, whether autograd asks for the input's gradient (not for a stem's or a patch
# embedding's: their input is the batch of images), bias (a ViT's patch embedding has one),
# and layer shapes (in channels, out channels, input side) of real CNNs; the batch is picked
# per size. Channels first (torchvision's default), cuDNN's defaults (TF32 for float32, no
# benchmark mode), as the user's step runs them.
CONV_CLASSES: dict[str, dict[str, Any]] = {
    "k1": {"kernel": 1, "stride": 1},
    "k3": {"kernel": 3, "stride": 1},
    "k3s2": {"kernel": 3, "stride": 2},
    "k1s2": {"kernel": 1, "stride": 2},
    "k7s2": {"kernel": 7, "stride": 2, "input_grad": False},
    "k16s16": {"kernel": 16, "stride": 16, "input_grad": False, "bias": True},
    # depthwise (a group per channel: MobileNet, EfficientNet, ConvNeXt) and grouped (RegNet's
    # groups of 24 channels), whose backward cuDNN runs far below the dense rates
    "k3dw": {"kernel": 3, "stride": 1, "groups": "dw"},
    "k3s2dw": {"kernel": 3, "stride": 2, "groups": "dw"},
    "k5dw": {"kernel": 5, "stride": 1, "groups": "dw"},
    "k7dw": {"kernel": 7, "stride": 1, "groups": "dw"},
    "k3g": {"kernel": 3, "stride": 1, "groups": 24},
    # depthwise in channels-last memory (ConvNeXt's: its blocks hand the convolution a permuted
    # tensor), which cuDNN runs with NHWC kernels about 4x the channels-first rate
    "k7dwcl": {"kernel": 7, "stride": 1, "groups": "dw", "channels_last": True},
    "k3dwcl": {"kernel": 3, "stride": 1, "groups": "dw", "channels_last": True},
}
_SHAPES = {  # "in-out@side"
    "k1": "32-32@28 64-64@56 64-256@56 256-64@56 512-128@28 1024-256@14 2048-512@7 "
    "512-2048@28 1024-1024@56",
    "k3": "32-32@28 64-64@56 128-128@28 256-256@14 512-512@7 256-256@56 512-512@28",
    "k3s2": "32-32@56 64-64@112 128-128@56 256-256@28 512-512@14 256-256@112",
    "k1s2": "64-128@28 256-512@56 512-1024@28 1024-2048@14 1024-2048@56",
    "k7s2": "3-32@112 3-64@224",
    "k16s16": "3-384@224 3-768@224 3-1024@224",
    "k3dw": "32-32@112 96-96@56 144-144@56 240-240@28 480-480@14 672-672@14 1152-1152@7",
    "k3s2dw": "96-96@112 144-144@56 240-240@28 672-672@28",
    "k5dw": "240-240@28 480-480@14 672-672@14 1152-1152@7",
    "k7dw": "96-96@56 192-192@28 384-384@14 768-768@7",
    "k3g": "48-48@56 120-120@28 336-336@14 888-888@7",
    "k7dwcl": "96-96@56 192-192@28 384-384@14 768-768@7",
    "k3dwcl": "32-32@112 96-96@56 144-144@56 240-240@28 480-480@14 672-672@14 1152-1152@7",
}
for _cls, _text in _SHAPES.items():
    CONV_CLASSES[_cls]["shapes"] = [
        tuple(int(n) for n in item.replace("@", "-").split("-")) for item in _text.split()
    ]
CONV_FLOPS = tuple(10 ** (8 + i / 2) for i in range(9))  # forward FLOPs, 1e8 to 1e12
CONV_DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
_CONV_BYTES = 24e9  # the most a point's tensors (and their gradients) may take


def conv_points(
    spec: dict[str, Any], targets: tuple[float, ...], element: int
) -> list[tuple[tuple[int, int, int], int]]:
    """``(shape, batch)`` per target FLOPs: a shape of the class whose batch for it is nearest
    32 (where several are as near, one target takes one and the next another: ResNet's stages
    do the same work at different widths); none where even one sample is 3x the target or
    the tensors are too large."""
    out: list[tuple[tuple[int, int, int], int]] = []
    for i, target in enumerate(targets):
        fits = []
        for cin, cout, size in spec["shapes"]:
            per_sample = conv_flops(spec, (cin, cout, size), 1)
            side = _side(spec, size)
            batch = max(1, round(target / per_sample))
            tensors = 2 * element * batch * (cin * size * size + cout * side * side)
            if per_sample <= 3 * target and batch <= 4096 and tensors <= _CONV_BYTES:
                fits.append((abs(math.log(batch / 32)), (cin, cout, size), batch))
        if not fits:
            continue
        best = min(score for score, _, _ in fits)
        near = [(shape, batch) for score, shape, batch in fits if score <= best + 0.35]
        pick = near[i % len(near)]
        if pick not in out:
            out.append(pick)
    return out


def conv_flops(spec: dict[str, Any], shape: tuple[int, int, int], batch: int) -> int:
    """A forward's FLOPs by PyTorch's formula (2 per multiply-add)."""
    cin, cout, size = shape
    kernel: int = spec["kernel"]
    return 2 * batch * cout * _side(spec, size) ** 2 * cin // _groups(spec, cin) * kernel**2


def _groups(spec: dict[str, Any], channels: int) -> int:
    """The class's groups at ``channels`` input channels: one per channel for ``dw``."""
    groups = spec.get("groups", 1)
    return channels if groups == "dw" else int(groups)


def _side(spec: dict[str, Any], size: int) -> int:
    """The output's side: padded to keep the size over the stride, none for patches."""
    k: int = spec["kernel"]
    s: int = spec["stride"]
    return (size + 2 * (0 if k == s else k // 2) - k) // s + 1


def graph_seconds(fn: Any, reps: int, replays: int = 5) -> float:
    """Median seconds of one ``fn()`` replayed inside a CUDA graph of ``reps`` calls: the GPU's
    time with no host launch in the way (warm-up on a side stream before the capture, as
    PyTorch's CUDA graph notes ask; cuDNN picks its engine there)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / reps)
    del graph
    return float(statistics.median(times))


def host_seconds(fn: Any, reps: int) -> float:
    """``--device cpu``: wall seconds of one ``fn()`` (a check of the logic, not a rate)."""
    fn()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def conv_case(
    spec: dict[str, Any], shape: tuple[int, int, int], batch: int, dtype: torch.dtype, device: str
) -> tuple[Any, Any, float, float]:
    """The forward and backward calls of one convolution, and their FLOPs as the trace records
    them (PyTorch's formulas; a grouped backward as memfit counts it): the backward as autograd
    calls it, ``convolution_backward`` with the gradients the layer needs."""
    from torch.utils.flop_counter import FlopCounterMode

    from memfit.trace import StepCosts

    k, s = spec["kernel"], spec["stride"]
    pad = 0 if k == s else k // 2
    cin, cout, size = shape
    groups = _groups(spec, cin)
    bias = spec.get("bias", False)
    mask = [spec.get("input_grad", True), True, bias]

    layout = torch.channels_last if spec.get("channels_last") else torch.contiguous_format

    def make(on: str) -> tuple[Any, Any]:
        x = torch.randn(batch, cin, size, size, device=on, dtype=dtype)
        w = torch.randn(cout, cin // groups, k, k, device=on, dtype=dtype)
        x, w = x.to(memory_format=layout), w.to(memory_format=layout)
        b = torch.randn(cout, device=on, dtype=dtype) if bias else None
        y = torch.nn.functional.conv2d(x, w, b, stride=s, padding=pad, groups=groups)
        gy = torch.randn_like(y)  # laid out as the output

        def fwd() -> Any:
            return torch.nn.functional.conv2d(x, w, b, stride=s, padding=pad, groups=groups)

        def bwd_args() -> tuple[Any, ...]:
            return (gy, x, w, [cout] if bias else None, [s, s], [pad, pad], [1, 1], False)

        def bwd() -> Any:
            return torch.ops.aten.convolution_backward(*bwd_args(), [0, 0], groups, mask)

        return fwd, (bwd, bwd_args)

    meta_fwd, (_, meta_args) = make("meta")
    with FlopCounterMode(display=False) as counter:
        meta_fwd()
    fwd_flops = float(counter.get_total_flops())
    op = torch.ops.aten.convolution_backward.default
    args = (*meta_args(), [0, 0], groups, mask)
    costs = StepCosts()
    costs.record(op, args, {}, op(*args), "bwd")
    fwd, (bwd, _) = make(device)
    return fwd, bwd, fwd_flops, float(costs.phases["bwd"].ops[0][1])


def conv_curves(
    device: str = "cuda",
    targets: tuple[float, ...] = CONV_FLOPS,
    dtypes: tuple[str, ...] = tuple(CONV_DTYPES),
) -> tuple[dict[str, list[list[float]]], list[dict[str, Any]]]:
    """Per shape class and dtype, ``conv:<class>:<dtype>`` and ``conv_bwd:<class>:<dtype>``
    curves (work: FLOPs), each point timed inside a CUDA graph; and each point's shape."""
    curves: dict[str, list[list[float]]] = {}
    rows: list[dict[str, Any]] = []
    timer = graph_seconds if device == "cuda" else host_seconds
    for dt_name in dtypes:
        dtype = CONV_DTYPES[dt_name]
        element = torch.empty(0, dtype=dtype).element_size()
        for cls, spec in CONV_CLASSES.items():
            for shape, batch in conv_points(spec, targets, element):
                row: dict[str, Any] = {
                    "class": cls,
                    "dtype": dt_name,
                    "shape": shape,
                    "batch": batch,
                }
                try:
                    fwd, bwd, flops, bwd_flops = conv_case(spec, shape, batch, dtype, device)
                    reps = min(200, max(2, round(1e11 / flops)))
                    row.update(flops=flops, bwd_flops=bwd_flops, reps=reps)
                    row["seconds"] = timer(fwd, reps)
                    row["bwd_seconds"] = timer(bwd, max(2, reps // 2))
                except Exception as exc:  # kept in the results, the rest runs
                    row["error"] = repr(exc)[:400]
                    print(f"conv {cls} {dt_name} {shape} x{batch}: {row['error']}", flush=True)
                rows.append(row)
                if "error" in row:
                    continue
                curves.setdefault(f"conv:{cls}:{dt_name}", []).append([flops, row["seconds"]])
                curves.setdefault(f"conv_bwd:{cls}:{dt_name}", []).append(
                    [bwd_flops, row["bwd_seconds"]]
                )
            if device == "cuda":
                torch.cuda.empty_cache()
            for key in (f"conv:{cls}:{dt_name}", f"conv_bwd:{cls}:{dt_name}"):
                if key in curves:
                    curves[key].sort()
                    print(key, _rates(curves[key]), flush=True)
    return curves, rows


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

    settings = dict({**TINY, **TINY_DEEP}[name])
    if name.startswith("resnet"):
        import torchvision

        def build() -> torch.nn.Module:
            return getattr(torchvision.models, name.partition("-")[0])(num_classes=10)

        def images() -> Any:
            return (torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,)))

        def loss(model: Any, batch: Any) -> torch.Tensor:
            return torch.nn.functional.cross_entropy(model(batch[0]), batch[1])

        return make_workload(build, images, loss_fn=loss, steps=steps, gpu="h200")
    import transformers as tf

    layers = settings.get("layers", 2)
    if name.startswith("gpt2"):
        config: Any = tf.GPT2Config(
            n_layer=layers, n_embd=64, n_head=2, vocab_size=512, bos_token_id=0, eos_token_id=0
        )
        cls: Any = tf.GPT2LMHeadModel
    else:
        config = tf.BertConfig(
            num_hidden_layers=layers,
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

    return phase_times(dataclasses.replace(tiny_workload(name, steps), **variant))[0]


def phase_times(workload: Any, first: int = 3) -> tuple[dict[str, float], dict[str, float]]:
    """Median seconds of each phase of a workload's steps from ``first`` on, in memfit's loop
    on the GPU, the GPU synchronized at each phase boundary (a host-bound step's phases are
    then the host's seconds); and the median seconds until the host had issued each phase's
    last op (before that synchronization: the host's own time)."""
    from torch.utils._pytree import tree_map

    from memfit.workload import StepHooks, optimizer_for, prepare_model, run_steps

    net = prepare_model(workload, "cuda")
    optimizer = optimizer_for(workload, net)
    marks: list[tuple[str, float, float]] = []  # label, issued, synchronized

    def phase(label: str) -> None:
        issued = time.perf_counter()
        torch.cuda.synchronize()
        marks.append((label, issued, time.perf_counter()))

    hooks = StepHooks(
        to_device=lambda b: tree_map(lambda t: t.cuda() if isinstance(t, torch.Tensor) else t, b),
        autocast=lambda dtype: torch.autocast("cuda", dtype=dtype),
        grad_scaler=lambda: torch.amp.GradScaler("cuda"),
        phase=phase,
    )
    run_steps(workload, net, optimizer, hooks)
    seconds: dict[str, list[float]] = {}
    issue: dict[str, list[float]] = {}
    for (label, _, start), (_, issued, done) in itertools.pairwise(marks):
        step, _, what = label.partition(".")
        if step.startswith("step") and int(step[4:]) >= first:
            seconds.setdefault(what, []).append(done - start)
            issue.setdefault(what, []).append(issued - start)
    return (
        {k: statistics.median(v) for k, v in seconds.items()},
        {k: statistics.median(v) for k, v in issue.items()},
    )


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


def tiny_rows(models: dict[str, dict[str, Any]] = TINY) -> list[dict[str, Any]]:
    rows = []
    for name in models:
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


def pinned_rates() -> dict[str, Any]:
    """Activation offload's copies: seconds per byte between pinned host memory and the GPU,
    each way, on a side stream, alone and beside a matrix product on the compute stream (the
    copies run under compute; whether either slows the other is what the step-time model
    needs to know). The rate is the slope between the largest sizes (a fixed cost apart)."""
    side = torch.cuda.Stream()
    sizes = [2**20, 2**24, 2**27, 2**29]
    out: dict[str, Any] = {"points": {}}
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for direction in ("d2h", "h2d"):
        points = []
        for n in sizes:
            host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
            gpu = torch.empty(n, dtype=torch.uint8, device="cuda")
            src, dst = (gpu, host) if direction == "d2h" else (host, gpu)

            def copy(src: Any = src, dst: Any = dst) -> None:
                with torch.cuda.stream(side):
                    dst.copy_(src, non_blocking=True)
                torch.cuda.current_stream().wait_stream(side)

            points.append([n, gpu_seconds(copy, reps=5)])
        out["points"][direction] = points
        (n0, t0), (n1, t1) = points[-2], points[-1]
        out[direction] = (t1 - t0) / (n1 - n0)
        print(f"pinned {direction}: {1 / out[direction] / 1e9:.1f} GB/s", flush=True)
    # beside compute: 512 MiB each way under 8192^3 bf16 products
    n = 2**29
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    gpu = torch.empty(n, dtype=torch.uint8, device="cuda")
    mm_alone = gpu_seconds(lambda: a @ a, reps=20)
    for direction in ("d2h", "h2d"):
        src, dst = (gpu, host) if direction == "d2h" else (host, gpu)
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.cuda.stream(side):
            dst.copy_(src, non_blocking=True)
        for _ in range(40):
            a @ a
        torch.cuda.synchronize()
        both = time.perf_counter() - start
        copy_alone = n * out[direction]
        out[f"{direction}_beside_mm"] = {
            "seconds": both,
            "mm_seconds": 40 * mm_alone,
            "copy_seconds": copy_alone,
        }
        print(
            f"{direction} beside 40 products: {both * 1e3:.1f} ms (products alone "
            f"{40 * mm_alone * 1e3:.1f}, copy alone {copy_alone * 1e3:.1f})",
            flush=True,
        )
    return out


def _rates(points: list[list[float]]) -> str:
    return " ".join(f"{p[0] / p[1] / 1e12:.0f}" for p in points) + " TFLOP/s"


PARTS = ("mm", "mm_align", "conv", "attn", "mem", "host", "tiny", "tiny-deep", "pinned")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--only", nargs="+", choices=PARTS, help="measure these parts (default: all)"
    )
    parser.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="cpu: the convolution part only, eagerly, to check its logic",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="convolutions at 1e8 and 1e10 FLOPs only (on the CPU: 1e8)",
    )
    args = parser.parse_args(argv)
    parts = args.only or (PARTS if args.device == "cuda" else ("conv",))
    if args.device == "cpu" and set(parts) != {"conv"}:
        parser.error(f"--device cpu measures the convolutions only, not {sorted(parts)}")
    started = time.time()
    on_gpu = args.device == "cuda"
    result: dict[str, Any] = {
        "meta": {
            "date": dt.date.today().isoformat(),
            "gpu": torch.cuda.get_device_name() if on_gpu else "cpu",
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if on_gpu else None,
            "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "command": " ".join(sys.argv),
            "parts": list(parts),
        },
        "curves": {},
    }
    curves = result["curves"]
    if "mm" in parts:
        curves.update(matmul_curves())
    if "mm_align" in parts:
        curves.update(unaligned_matmul_curves())
    if "conv" in parts:
        conv_started = time.time()
        targets = ((1e8, 1e10) if on_gpu else (1e8,)) if args.quick else CONV_FLOPS
        conv, rows = conv_curves(args.device, targets)
        curves.update(conv)
        result["conv_points"] = rows
        if on_gpu:
            result["graph_timed"] = sorted(conv)
        result["meta"]["conv_seconds"] = round(time.time() - conv_started, 1)
        print(f"convolutions: {result['meta']['conv_seconds']} s", flush=True)
    if "attn" in parts:
        curves.update(attention_curves())
    if "mem" in parts:
        curves["mem"] = memory_curve()
    if "host" in parts:
        from host_probe import probe_seconds

        result["host_probe_seconds"] = probe_seconds()
        print(f"host probe {result['host_probe_seconds'] * 1e6:.2f} us/op", flush=True)
        result["cpu_dispatch_seconds"] = cpu_dispatch()
        result["kernel_floor_seconds"] = kernel_floor()
        result["input_seconds_per_byte"] = input_rates()
    if "tiny" in parts:
        result["tiny"] = tiny_rows()
    if "tiny-deep" in parts:
        result["tiny_deep"] = tiny_rows(TINY_DEEP)
    if "pinned" in parts:
        result["pinned"] = pinned_rates()
    result["meta"]["seconds"] = round(time.time() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
