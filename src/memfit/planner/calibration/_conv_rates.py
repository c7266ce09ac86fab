"""Convolutions' measured rates, by the shape class memfit's trace gives them
(``memfit.trace.conv_class``): curves ``conv:<class>:<dtype>`` and ``conv_bwd:<class>:<dtype>``
of (FLOPs, seconds), each point timed inside a CUDA graph (eager timings of small convolutions
are the host's launch)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from memfit.planner.calibration._timers import graph_seconds

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


def conv_points(
    spec: dict[str, Any], targets: tuple[float, ...], element: int, room: float = 24e9
) -> list[tuple[tuple[int, int, int], int]]:
    """``(shape, batch)`` per target FLOPs: a shape of the class whose batch for it is nearest
    32 (where several are as near, one target takes one and the next another: ResNet's stages
    do the same work at different widths); none where even one sample is 3x the target or
    the tensors (and their gradients) would take more than ``room`` bytes."""
    out: list[tuple[tuple[int, int, int], int]] = []
    for i, target in enumerate(targets):
        fits = []
        for cin, cout, size in spec["shapes"]:
            per_sample = conv_flops(spec, (cin, cout, size), 1)
            side = _side(spec, size)
            batch = max(1, round(target / per_sample))
            tensors = 2 * element * batch * (cin * size * size + cout * side * side)
            if per_sample <= 3 * target and batch <= 4096 and tensors <= room:
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
    room: float,
    targets: tuple[float, ...] = CONV_FLOPS,
    dtypes: tuple[str, ...] = tuple(CONV_DTYPES),
    *,
    device: str = "cuda",
    timer: Callable[[Callable[[], Any], int], float] = graph_seconds,
    report: Callable[[str], None] | None = None,
) -> tuple[dict[str, list[list[float]]], list[dict[str, Any]]]:
    """Per shape class and dtype, ``conv:<class>:<dtype>`` and ``conv_bwd:<class>:<dtype>``
    curves (work: FLOPs), each point timed by ``timer`` (inside a CUDA graph); and each
    point's shape, seconds, or the error that stopped it (the other points still run).
    ``report`` is told each class as it is done."""
    curves: dict[str, list[list[float]]] = {}
    rows: list[dict[str, Any]] = []
    for dt_name in dtypes:
        dtype = CONV_DTYPES[dt_name]
        element = torch.empty(0, dtype=dtype).element_size()
        for cls, spec in CONV_CLASSES.items():
            for shape, batch in conv_points(spec, targets, element, room):
                row = _conv_row(spec, shape, batch, dtype, device, timer)
                rows.append({"class": cls, "dtype": dt_name, **row})
                if "error" in row:
                    continue
                curves.setdefault(f"conv:{cls}:{dt_name}", []).append(
                    [row["flops"], row["seconds"]]
                )
                curves.setdefault(f"conv_bwd:{cls}:{dt_name}", []).append(
                    [row["bwd_flops"], row["bwd_seconds"]]
                )
            if device == "cuda":
                torch.cuda.empty_cache()
            for key in (f"conv:{cls}:{dt_name}", f"conv_bwd:{cls}:{dt_name}"):
                curves.get(key, []).sort()
            if report is not None:
                report(f"conv:{cls}:{dt_name}")
    return curves, rows


def _conv_row(
    spec: dict[str, Any],
    shape: tuple[int, int, int],
    batch: int,
    dtype: torch.dtype,
    device: str,
    timer: Callable[[Callable[[], Any], int], float],
) -> dict[str, Any]:
    row: dict[str, Any] = {"shape": shape, "batch": batch}
    try:
        fwd, bwd, flops, bwd_flops = conv_case(spec, shape, batch, dtype, device)
        reps = min(200, max(2, round(1e11 / flops)))
        row.update(flops=flops, bwd_flops=bwd_flops, reps=reps)
        row["seconds"] = timer(fwd, reps)
        row["bwd_seconds"] = timer(bwd, max(2, reps // 2))
    except Exception as exc:  # kept in the results, the other points run
        row["error"] = repr(exc)[:400]
    return row
