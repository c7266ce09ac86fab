"""The GPU's measured rates a step-time model reads: matrix products, attention and
elementwise traffic as curves of ``(work, seconds)`` points, the smallest kernel's time, and
copies between the host and the GPU. Each takes ``room``, the bytes its tensors may use, so
that a small GPU measures fewer points rather than running out of memory."""

from __future__ import annotations

import functools
import statistics
import time
from typing import Any

import torch

from memfit.planner.calibration._timers import gpu_seconds

Curve = list[list[float]]  # (work, seconds) points, work ascending

_MATMUL = (
    ("mm:bf16", torch.bfloat16, False),
    ("mm:fp16", torch.float16, False),
    ("mm:fp32", torch.float32, False),
    ("mm:tf32", torch.float32, True),
)
_ATTENTION = ((1, 128), (4, 256), (8, 512), (8, 1024), (4, 2048), (2, 4096))  # batch, tokens


def matmul_curves(room: int) -> dict[str, Curve]:
    """``mm:<dtype>``: ``torch.mm`` of square matrices from 64 to 8192 (work: FLOPs), in
    bfloat16, float16, float32 without TF32 (PyTorch's default) and with it (``mm:tf32``)."""
    curves: dict[str, Curve] = {}
    allowed = torch.backends.cuda.matmul.allow_tf32
    try:
        for name, dtype, tf32 in _MATMUL:
            torch.backends.cuda.matmul.allow_tf32 = tf32
            element = torch.empty(0, dtype=dtype).element_size()
            points = []
            for n in (64, 128, 256, 512, 1024, 2048, 4096, 8192):
                if 3 * n * n * element > room:
                    break
                a = torch.randn(n, n, device="cuda", dtype=dtype)
                b = torch.randn(n, n, device="cuda", dtype=dtype)
                reps = 50 if n <= 2048 else 10
                points.append([2.0 * n**3, gpu_seconds(functools.partial(torch.mm, a, b), reps)])
                del a, b
            curves[name] = points
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allowed
    return curves


def unaligned_matmul_curves(room: int) -> dict[str, Curve]:
    """``mm_a<N>:<dtype>``: half-precision products whose rows are N-element aligned (N = 1,
    2, 4: a vocabulary of 50257 or 30522 columns), which cuBLAS runs with slower kernels than
    16-byte aligned ones. A language model's head at growing token counts (k = 768, n near
    32000): each point the median of its three products in a training step."""
    curves: dict[str, Curve] = {}
    for dtype_name, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        for align, n in ((1, 32001), (2, 32002), (4, 32004)):
            points = []
            for m in (256, 1024, 4096, 16384, 32768):
                k = 768
                if 2 * (m * k + k * n + m * n) > room:
                    break
                a = torch.randn(m, k, device="cuda", dtype=dtype)
                b = torch.randn(k, n, device="cuda", dtype=dtype)
                g = torch.randn(m, n, device="cuda", dtype=dtype)
                reps = 20 if m <= 4096 else 5
                times = [
                    gpu_seconds(functools.partial(torch.mm, a, b), reps),
                    gpu_seconds(functools.partial(torch.mm, g, b.t()), reps),
                    gpu_seconds(functools.partial(torch.mm, a.t(), g), reps),
                ]
                points.append([2.0 * m * k * n, statistics.median(times)])
                del a, b, g
            if points:
                curves[f"mm_a{align}:{dtype_name}"] = points
    return curves


def attention_curves(room: int) -> dict[str, Curve]:
    """``attn:<dtype>`` and ``attn_bwd:<dtype>``: ``scaled_dot_product_attention`` forward and
    backward (causal off, 12 heads of 64; work: FLOPs by PyTorch's formula, the backward 2.5
    times the forward's), bfloat16 and float32, with the backend PyTorch picks (cuDNN's on an
    H200 with torch 2.11); ``attn_dropout:<dtype>`` and ``attn_dropout_bwd:<dtype>`` the same
    with dropout 0.1 inside the kernel (BERT's), which runs slower."""
    curves: dict[str, Curve] = {}
    for dtype_name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        for family, dropout in (("attn", 0.0), ("attn_dropout", 0.1)):
            forward, backward = _attention_points(room, dtype, dropout)
            curves[f"{family}:{dtype_name}"] = forward
            curves[f"{family}_bwd:{dtype_name}"] = backward
    return curves


def _attention_points(room: int, dtype: torch.dtype, dropout: float) -> tuple[Curve, Curve]:
    from torch.utils.flop_counter import FlopCounterMode

    element = torch.empty(0, dtype=dtype).element_size()
    forward: Curve = []
    backward: Curve = []
    for batch, seq in _ATTENTION:
        if 8 * batch * 12 * seq * 64 * element > room:
            break
        q, k, v = (
            torch.randn(batch, 12, seq, 64, device="cuda", dtype=dtype, requires_grad=True)
            for _ in range(3)
        )
        grad = torch.randn(batch, 12, seq, 64, device="cuda", dtype=dtype)

        def fwd(q: Any = q, k: Any = k, v: Any = v) -> torch.Tensor:
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=dropout)

        def both(q: Any = q, k: Any = k, v: Any = v, g: Any = grad) -> None:
            torch.autograd.grad(fwd(q, k, v), (q, k, v), g)

        with FlopCounterMode(display=False) as counter:
            fwd()
        flops = float(counter.get_total_flops())
        t_fwd = gpu_seconds(fwd, reps=10)
        t_both = gpu_seconds(both, reps=10)
        forward.append([flops, t_fwd])
        backward.append([2.5 * flops, max(t_both - t_fwd, 1e-6)])
    return forward, backward


def memory_curve(room: int) -> Curve:
    """``mem``: an out-of-place add of float32 tensors (work: the bytes read and written), from
    4 KiB up to 1 GiB each where there is room."""
    points: Curve = []
    for log2 in range(10, 29, 2):  # 1 Ki to 256 Mi float32 elements
        n = 2**log2
        if 12 * n > room:
            break
        a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        out = torch.empty_like(a)
        reps = 200 if n < 2**20 else 20
        points.append([12.0 * n, gpu_seconds(functools.partial(torch.add, a, b, out=out), reps)])
        del a, b, out
    return points


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
    return gpu_seconds(graph.replay, reps=5) / 500


def input_rates() -> dict[str, float]:
    """Seconds per byte to make a float32 batch on the host (``torch.randn``, as memfit's loop
    does) and to copy it to the GPU from pageable memory."""
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
    return {"make": statistics.median(made) / (4 * n), "h2d": statistics.median(copied) / (4 * n)}


def pinned_rates(room: int) -> dict[str, float]:
    """Activation offload's copies: seconds per byte between pinned host memory and the GPU,
    each way, on a side stream; the slope between the two largest sizes (a fixed cost apart)."""
    side = torch.cuda.Stream()
    sizes = [n for n in (2**20, 2**24, 2**27, 2**29) if n <= room // 2]
    out: dict[str, float] = {}
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

            points.append((n, gpu_seconds(copy, reps=5)))
            del host, gpu
        (n0, t0), (n1, t1) = points[-2], points[-1]
        out[direction] = max((t1 - t0) / (n1 - n0), 1e-13)
    return out
