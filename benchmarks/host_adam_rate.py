"""How fast this host's cores step AdamW, for the time the planner gives the optimizer stepped
on the host (``memfit.technique.host_optimizer``): parameter elements per second of torch's
fused and foreach AdamW on CPU tensors, fp32 and bf16, at the process's default threads.

    python benchmarks/host_adam_rate.py --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch


def rate(elements: int, tensors: int, dtype: torch.dtype, fused: bool) -> float:
    """Elements stepped per second, the median of five steps after one warm-up."""
    params = [torch.zeros(elements, dtype=dtype, requires_grad=True) for _ in range(tensors)]
    for p in params:
        p.grad = torch.full_like(p, 1e-3)
    kind = {"fused": True} if fused else {"foreach": True}
    opt = torch.optim.AdamW(params, lr=1e-4, **kind)
    opt.step()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - start)
    return elements * tensors / sorted(times)[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rows = []
    for elements, tensors in ((1 << 20, 64), (1 << 24, 8), (1 << 26, 4)):
        for dtype in (torch.float32, torch.bfloat16):
            for fused in (True, False):
                r = rate(elements, tensors, dtype, fused)
                rows.append(
                    {
                        "elements": elements,
                        "tensors": tensors,
                        "dtype": str(dtype).removeprefix("torch."),
                        "kernel": "fused" if fused else "foreach",
                        "elements_per_s": r,
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
    meta = {"torch": torch.__version__, "threads": torch.get_num_threads()}
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
