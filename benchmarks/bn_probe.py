"""Batch norm's allocations on CUDA, by dtype, input layout (contiguous, transposed,
channels-last), mode and the affine parameters' dtype: the allocator's trace of each call.

    python benchmarks/bn_probe.py OUT.json      # on a GPU

Why: cuDNN's batch norm (float32 inputs, or float16 ones with float32 weights) copies an input
that is not contiguous before it runs and gives a contiguous output, where the meta kernel
keeps the input's strides.
"""

from __future__ import annotations

import itertools
import json
import sys
from typing import Any

import torch
from torch import nn

CHANNELS = 128
LAYOUTS = ("contiguous", "transposed", "channels_last")


def _input(dims: int, layout: str, dtype: torch.dtype) -> torch.Tensor:
    if dims == 3:  # (N, L, C) transposed to (N, C, L), as sequence models hand it over
        base = torch.randn(256, 64, CHANNELS, device="cuda", dtype=dtype).transpose(1, 2)
        return base if layout == "transposed" else base.contiguous()
    base = torch.randn(64, CHANNELS, 32, 32, device="cuda", dtype=dtype)
    if layout == "transposed":
        return base.transpose(2, 3)
    if layout == "channels_last":
        return base.contiguous(memory_format=torch.channels_last)
    return base


def _case(dtype: torch.dtype, dims: int, layout: str, train: bool, affine: str) -> dict[str, Any]:
    torch.cuda.empty_cache()
    bn = (nn.BatchNorm1d if dims == 3 else nn.BatchNorm2d)(CHANNELS).cuda()
    if affine == "same":
        bn = bn.to(dtype)
    bn.train(train)
    x = _input(dims, layout, dtype).requires_grad_(train)
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=100000)
    info: dict[str, Any] = {}
    try:
        y = bn(x)
        info = {"out_stride": list(y.stride()), "out_contig": y.is_contiguous(), "error": None}
        if train:
            y.sum().backward()
    except Exception as exc:  # recorded, the next case goes on
        info = {"error": repr(exc)[:300]}
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    events = [
        [e["action"], e["size"]]
        for trace in snap["device_traces"]
        for e in trace
        if e["action"] in ("alloc", "free_completed")
    ]
    return {
        "dtype": str(dtype), "dims": dims, "layout": layout, "train": train, "affine": affine,
        "x_bytes": x.numel() * x.element_size(), **info, "trace": events,
    }  # fmt: skip


def main() -> int:
    cases = []
    dtypes = (torch.float32, torch.bfloat16, torch.float16)
    grid = itertools.product(dtypes, (3, 4), LAYOUTS, (True, False), ("same", "fp32"))
    for dtype, dims, layout, train, affine in grid:
        if layout == "channels_last" and dims == 3:
            continue
        cases.append(_case(dtype, dims, layout, train, affine))
    meta = {
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "gpu": torch.cuda.get_device_name(),
    }
    with open(sys.argv[1], "w") as fh:
        json.dump({**meta, "cases": cases}, fh)
    print(len(cases), "cases")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
