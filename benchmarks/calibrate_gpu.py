"""Measure the rates a step-time model needs, once per GPU type (the planner's calibration).

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
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from memfit.planner.calibration._conv_rates import CONV_CLASSES, CONV_FLOPS, conv_flops, conv_points
from memfit.planner.calibration._gpu_rates import (
    attention_curves as _attention_curves,
)
from memfit.planner.calibration._gpu_rates import input_rates, kernel_floor
from memfit.planner.calibration._gpu_rates import matmul_curves as _matmul_curves
from memfit.planner.calibration._gpu_rates import memory_curve as _memory_curve
from memfit.planner.calibration._gpu_rates import (
    unaligned_matmul_curves as _unaligned_matmul_curves,
)
from memfit.planner.calibration._host_scale import VARIANTS
from memfit.planner.calibration._host_scale import phase_seconds as phase_times
from memfit.planner.calibration._timers import gpu_seconds

__all__ = ["CONV_CLASSES", "CONV_FLOPS", "conv_flops", "conv_points", "gpu_seconds", "phase_times"]

ROOM = 24e9  # the most a point's tensors may take (an H200 has 141 GB)


def matmul_curves() -> dict[str, list[list[float]]]:
    curves = _matmul_curves(int(ROOM))
    for name, points in curves.items():
        print(name, _rates(points), flush=True)
    return curves


def unaligned_matmul_curves() -> dict[str, list[list[float]]]:
    curves = _unaligned_matmul_curves(int(ROOM))
    for name, points in curves.items():
        print(name, _rates(points), flush=True)
    return curves


def attention_curves() -> dict[str, list[list[float]]]:
    curves = _attention_curves(int(ROOM))
    for name, points in curves.items():
        print(name, _rates(points), flush=True)
    return curves


def memory_curve() -> list[list[float]]:
    points = _memory_curve(int(ROOM))
    print("mem", [f"{p[0]:.0e}B {p[0] / p[1] / 1e9:.0f}GB/s" for p in points], flush=True)
    return points


def conv_curves(
    device: str = "cuda",
    targets: tuple[float, ...] = CONV_FLOPS,
    dtypes: tuple[str, ...] = ("bf16", "fp32"),
) -> tuple[dict[str, list[list[float]]], list[dict[str, Any]]]:
    """The library's convolution curves (``--device cpu``: timed eagerly on the host, to check
    the logic), printed per class."""
    from memfit.planner.calibration._conv_rates import conv_curves as measure

    timer = {"cpu": host_seconds}.get(device)
    curves, rows = measure(
        ROOM, targets, dtypes, device=device, **({"timer": timer} if timer else {})
    )
    for key, points in curves.items():
        print(key, _rates(points), flush=True)
    for row in rows:
        if "error" in row:
            print(f"conv {row['class']} {row['dtype']} {row['shape']}: {row['error']}", flush=True)
    return curves, rows


TINY: dict[str, dict[str, Any]] = {
    "gpt2-tiny": {"batch_size": 2, "seq_len": 32},
    "bert-tiny": {"batch_size": 2, "seq_len": 32},
    "resnet18-tiny": {"batch_size": 2},
}
# the same tiny models deeper (``--only tiny-deep``): with two depths each, a
# phase's host seconds split into a cost per op and what the phase costs whatever its ops
# (a transformers model's Python around its layers, the backward's start), which the two-layer
# models alone fold into the cost per op
TINY_DEEP: dict[str, dict[str, Any]] = {
    "gpt2-tiny-8": {"batch_size": 2, "seq_len": 32, "layers": 8},
    "bert-tiny-8": {"batch_size": 2, "seq_len": 32, "layers": 8},
    "resnet34-tiny": {"batch_size": 2},
}


def host_seconds(fn: Any, reps: int) -> float:
    """``--device cpu``: wall seconds of one ``fn()`` (a check of the logic, not a rate)."""
    fn()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


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


TINY_VARIANTS: list[tuple[str, dict[str, Any]]] = [
    *list(VARIANTS.items())[:2],
    ("bf16-mixed, fused", {"precision": "bf16-mixed", "optimizer": "adamw-fused"}),
    *list(VARIANTS.items())[2:],
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
    from memfit.planner.calibration._gpu_rates import pinned_rates as rates

    side = torch.cuda.Stream()
    out: dict[str, Any] = dict(rates(int(ROOM)))
    for direction in ("d2h", "h2d"):
        print(f"pinned {direction}: {1 / out[direction] / 1e9:.1f} GB/s", flush=True)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
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
        print(f"kernel floor {result['kernel_floor_seconds'] * 1e6:.2f} us", flush=True)
        print(f"input {result['input_seconds_per_byte']}", flush=True)
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
